package tracer_test

import (
	"context"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/probe"
	"github.com/probekit/probekit/record"
	"github.com/probekit/probekit/tracer"
)

// gatedScript calls f 200 times, under a profile function when its
// first argument is given.
const gatedScript = `import sys
if len(sys.argv) > 1:
    sys.setprofile(lambda *a: None)
def f():
    pass
for _ in range(200):
    f()
`

// CPython 3.11 fires function__entry for every call only while a
// profile or trace function is set; without one its start-up frames
// (<frozen importlib._bootstrap>, entered from C) fire it anyway. A trace
// of a launched python3.11 that never set one says so at its end, with
// the hits it saw, in events and in count mode; one that set it says
// nothing, and sees every call.
func TestRunGatedPython(t *testing.T) {
	testkit.RequireKernel(t)
	if _, err := os.Stat(python311); err != nil {
		t.Skipf("no %s: %v", python311, err)
	}
	spec, err := probe.Parse(python311 + ":python:function__entry")
	if err != nil {
		t.Fatal(err)
	}
	const hint = "python:function__entry: CPython fires it for every call only with a profile or trace function set in the process (sys.setprofile or sys.settrace), and the command set none while traced"
	for _, c := range []struct {
		name    string
		mode    record.Mode
		profile bool
	}{
		{"events", record.ModeEvents, false},
		{"count", record.ModeCount, false},
		{"events, setprofile", record.ModeEvents, true},
		{"count, setprofile", record.ModeCount, true},
	} {
		cmd := []string{python311, "-c", gatedScript}
		if c.profile {
			cmd = append(cmd, "profile")
		}
		var warn strings.Builder
		hits := 0
		cfg := &tracer.Config{Probes: []probe.Spec{spec}, Command: cmd, Mode: c.mode, Output: io.Discard, Warnings: &warn}
		if c.mode == record.ModeEvents {
			cfg.OnHit = func(*tracer.Hit) error { hits++; return nil }
		}
		if err := tracer.Run(context.Background(), cfg); err != nil {
			t.Fatalf("%s: Run: %v (%s)", c.name, err, warn.String())
		}
		got := strings.Contains(warn.String(), hint)
		switch {
		case got == c.profile:
			t.Errorf("%s: warnings %q, want the hint %v", c.name, warn.String(), !c.profile)
		case c.mode == record.ModeEvents && c.profile && hits < 200:
			t.Errorf("%s: %d hits, want at least f's 200", c.name, hits)
		case c.mode == record.ModeEvents && !c.profile && (hits == 0 || hits >= 200 || !strings.Contains(warn.String(), "hits, not every call")):
			// The start-up frames fire it, f's calls do not.
			t.Errorf("%s: %d hits, warnings %q: want a few, counted in the hint", c.name, hits, warn.String())
		}
	}
}
