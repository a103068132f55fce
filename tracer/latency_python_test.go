package tracer_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/probe"
	"github.com/probekit/probekit/record"
	"github.com/probekit/probekit/tracer"
)

// python311 is the interpreter of the test: Debian's, built with its
// USDT probes.
const python311 = "/usr/bin/python3.11"

// latencyScript calls work, which sleeps 2 ms, 40 times under a
// sys.setprofile callback: CPython 3.11 fires function__return without
// function__entry for the callback, which paired with the latest start
// would close work's start early (about 6.5 µs in).
const latencyScript = `import sys, time
def work():
    time.sleep(0.002)
def prof(frame, event, arg):
    pass
sys.setprofile(prof)
for _ in range(40):
    work()
sys.setprofile(None)
`

// probekit trace --latency python:function__entry python:function__return
// --by 'str 2' on real CPython 3.11: each end closes the start of its own
// (file, function) (record.SetLatencyMatch), so all 40 calls of the 2 ms
// function are in [1 ms, 8 ms) (log2 buckets of ns: [2^20, 2^23)), none
// under 1 ms, and the callback's unmatched ends are reported.
func TestKernelLatencyPython(t *testing.T) {
	testkit.RequireKernel(t)
	if _, err := os.Stat(python311); err != nil {
		t.Skipf("no %s: %v", python311, err)
	}
	script := filepath.Join(t.TempDir(), "work.py")
	if err := os.WriteFile(script, []byte(latencyScript), 0o644); err != nil {
		t.Fatal(err)
	}
	var specs []probe.Spec
	for _, p := range []string{"function__entry", "function__return"} {
		s, err := probe.Parse(python311 + ":python:" + p)
		if err != nil {
			t.Fatal(err)
		}
		specs = append(specs, s)
	}
	keys, err := tracer.ParseKeys("str 2")
	if err != nil {
		t.Fatal(err)
	}
	var out, warn strings.Builder
	cfg := &tracer.Config{Probes: specs, Mode: record.ModeLatency, Keys: keys, JSON: true,
		Command: []string{python311, script}, Output: &out, Warnings: &warn}
	if err := cfg.PairLatency(); err != nil {
		t.Fatal(err)
	}
	if err := tracer.Run(context.Background(), cfg); err != nil {
		t.Fatalf("Run: %v (%s)", err, warn.String())
	}
	var found bool
	for _, l := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
		var kh struct {
			Key     map[string]string
			Buckets []struct {
				Low, High, Count uint64
			}
		}
		if err := json.Unmarshal([]byte(l), &kh); err != nil {
			t.Fatalf("not JSON: %q: %v", l, err)
		}
		if kh.Key["str2"] != "work" {
			continue
		}
		found = true
		var in, all uint64
		for _, b := range kh.Buckets {
			all += b.Count
			if b.Low >= 1<<20 && b.High <= 1<<23 {
				in += b.Count
			}
		}
		if all != 40 || in != 40 {
			t.Errorf("work: %d calls, %d in [1 ms, 8 ms), want 40 and 40: %s", all, in, l)
		}
	}
	if !found {
		t.Fatalf("no histogram of work:\n%s\n%s", out.String(), warn.String())
	}
	if !strings.Contains(warn.String(), "ends without a start") {
		t.Errorf("the callback's unmatched ends not reported:\n%s", warn.String())
	}
}
