package tracer

import (
	"slices"
	"testing"

	"github.com/probekit/probekit/attach"
	"github.com/probekit/probekit/internal/test/testkit"
)

func TestSilentHints(t *testing.T) {
	sites := []attach.Site{
		{Path: "/usr/lib/x86_64-linux-gnu/libruby-3.1.so.3.1", Probe: "USDT ruby:method__entry", RefCtrOffset: 0x10},
		{Path: "/usr/lib/x86_64-linux-gnu/libruby-3.1.so.3.1", Probe: "USDT ruby:method__entry", RefCtrOffset: 0x10},  // a second location
		{Path: "/usr/lib/x86_64-linux-gnu/libruby-3.1.so.3.1", Probe: "USDT ruby:cmethod__entry", RefCtrOffset: 0x12}, // not gated
		{Path: "/usr/bin/python3.11", Probe: "USDT python:function__entry", RefCtrOffset: 0x20},                       // hit
		{Path: "/usr/bin/php8.2", Probe: "USDT php:function__entry", RefCtrOffset: 0x30},
		{Path: "/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so", Probe: "USDT hotspot:method__entry"},
		{Path: "/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so", Probe: "USDT hotspot:method__return"},
		{Path: "/srv/app", Probe: "USDT python:function__entry"},  // a gated name, not in a runtime's file
		{Path: "/usr/bin/php8.2", Probe: "entry of zend_execute"}, // a function probe
	}
	got := silentHints(sites, map[string]int{"python:function__entry": 3}, nil, nil)
	want := []string{
		"probekit trace: ruby:method__entry saw no hit: Ruby fires it only with a TracePoint on :call (:return for method__return) enabled in the process (see docs/runtimes.md)",
		"probekit trace: php:function__entry saw no hit: PHP fires it only with the environment variable USE_ZEND_DTRACE=1 in the process (see docs/runtimes.md)",
		"probekit trace: hotspot:method__entry, hotspot:method__return saw no hit: OpenJDK fires them only with the JVM option -XX:+ExtendedDTraceProbes (see docs/runtimes.md)",
	}
	if !slices.Equal(got, want) {
		t.Errorf("got\n\t%q\nwant\n\t%q", got, want)
	}
	if got := silentHints(sites[6:8], map[string]int{}, nil, nil); len(got) != 1 {
		t.Errorf("a gated name outside a runtime's file: %q, want only libjvm's hint", got)
	}
}

func TestGateOf(t *testing.T) {
	for _, c := range []struct {
		path, probe, runtime string
	}{
		{"/usr/bin/python3.11", "python:function__entry", "CPython"},
		{"/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0", "python:line", "CPython"},
		{"/usr/bin/python3.11", "python:function__return", ""}, // fires without tracing
		{"/usr/bin/ruby3.1", "ruby:method__return", "Ruby"},
		{"/usr/lib/apache2/modules/libphp8.2.so", "php:execute__entry", "PHP"},
		{"/usr/bin/php8.2", "php:request__startup", ""}, // fires without USE_ZEND_DTRACE
		{"/opt/jdk/lib/server/libjvm.so", "hotspot:object__alloc", "OpenJDK"},
		{"/opt/jdk/lib/server/libjvm.so", "hotspot:gc__begin", ""},
	} {
		g := gateOf(c.path, c.probe)
		got := ""
		if g != nil {
			got = g.runtime
		}
		if got != c.runtime {
			t.Errorf("gateOf(%s, %s) = %q, want %q", c.path, c.probe, got, c.runtime)
		}
	}
}

// notFollowed: only programs other than the launched one (not libraries,
// not the launched program) get the hint, once per file.
func TestNotFollowed(t *testing.T) {
	prog, lib := testkit.Fixture("usdt_sample"), testkit.Fixture("libusdt_lib.so")
	sites := []attach.Site{
		{Path: prog, Probe: "USDT sample:loop"},
		{Path: prog, Probe: "USDT sample:loop"},
		{Path: prog, Probe: "USDT sample:sizes"},
		{Path: lib, Probe: "USDT sample:libonly"},
	}
	rest, hints := notFollowed(sites, "/bin/sh", "sh")
	want := []string{"probekit trace: sample:loop, sample:sizes saw no hit: sh is not " + prog + ", so only a child could run it, and a child is not followed: add -f"}
	if !slices.Equal(hints, want) || len(rest) != 1 || rest[0].Path != lib {
		t.Errorf("hints %q, rest %+v; want %q and the library's site", hints, rest, want)
	}
	if rest, hints := notFollowed(sites, prog, prog); len(hints) != 0 || len(rest) != len(sites) {
		t.Errorf("the launched program: hints %q, rest %+v", hints, rest)
	}
}

// A closed gate (watchGates saw no setter called) is hinted whatever
// the hits, and in count mode (hits nil); an opened one never.
func TestSilentHintsClosedGate(t *testing.T) {
	sites := []attach.Site{
		{Path: "/usr/bin/python3.11", Probe: "USDT python:function__entry"},
		{Path: "/usr/bin/python3.11", Probe: "USDT python:function__return"}, // not gated
	}
	cpython := gateOf("/usr/bin/python3.11", "python:function__entry")
	const head = "probekit trace: python:function__entry: CPython fires it for every call only with a profile or trace function set in the process (sys.setprofile or sys.settrace), and the command set none while traced: "
	for _, c := range []struct {
		hits   map[string]int
		closed bool
		want   []string
	}{
		{map[string]int{"python:function__entry": 12}, true, []string{head + "12 hits, not every call (see docs/runtimes.md)"}},
		{map[string]int{}, true, []string{head + "no hit (see docs/runtimes.md)"}},
		{nil, true, []string{head + "what was counted is not every call (see docs/runtimes.md)"}},
		{map[string]int{}, false, nil},
		{nil, false, nil},
	} {
		got := silentHints(sites, c.hits, nil, map[*runtimeGate]bool{cpython: c.closed})
		if !slices.Equal(got, c.want) {
			t.Errorf("hits %v closed %v: got %q, want %q", c.hits, c.closed, got, c.want)
		}
	}
}
