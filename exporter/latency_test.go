package exporter_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/probekit/probekit/exporter"
	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/probe"
	"github.com/probekit/probekit/record"
)

// pyWork sets a profile function, then calls a function that sleeps 2 ms
// 40 times. CPython 3.11 fires function__return without function__entry
// for the profile callback (issue 36 item 4).
const pyWork = `import sys, time
sys.setprofile(lambda *a: None)
def probekit_export_latency_work():
    time.sleep(0.002)
for _ in range(40):
    probekit_export_latency_work()
`

// TestLatencyPythonMatch: a latency histogram from python:function__entry
// to python:function__return pairs each return with the entry of its own
// file and function, so the 40 calls of a 2 ms function land at 2 ms,
// not at the few microseconds between the profile callback's unmatched
// return and the function's entry; unmatched returns are counted, not
// paired.
func TestLatencyPythonMatch(t *testing.T) {
	testkit.RequireKernel(t)
	py := testkit.Python311(t)
	script := filepath.Join(t.TempDir(), "work.py")
	if err := os.WriteFile(script, []byte(pyWork), 0o644); err != nil {
		t.Fatal(err)
	}
	_, reg := start(t, &exporter.Config{Metrics: []*exporter.Metric{{
		Name: "py_call_seconds", Type: exporter.Histogram,
		Probe:   &probe.Spec{Kind: record.KindUSDT, Target: py, Provider: "python", Name: "function__entry"},
		End:     &probe.Spec{Kind: record.KindUSDT, Target: py, Provider: "python", Name: "function__return"},
		Labels:  []exporter.Label{{Name: "function", Arg: probe.Arg(2), String: true}},
		Buckets: []float64{0.001, 0.004, 0.1},
		// The interpreter's start calls many functions, and other
		// Python programs on the host count here too: room for them
		// all, so that the test's function keeps its own series.
		MaxSeries: exporter.MaxMaxSeries,
	}}})
	if out, err := exec.Command(py, script).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", script, err, out)
	}
	got := gather(t, reg, "")
	const series = `py_call_seconds_%s{function="probekit_export_latency_work"%s}`
	k := func(s, le string) string {
		if le != "" {
			le = `,le="` + le + `"`
		}
		return fmt.Sprintf(series, s, le)
	}
	t.Logf("40 calls of 2 ms: %v under 1 ms, %v under 4 ms, %v under 100 ms, sum %.4f s",
		got[k("bucket", "0.001")], got[k("bucket", "0.004")], got[k("bucket", "0.1")], got[k("sum", "")])
	if n := got[k("count", "")]; n != 40 {
		t.Errorf("%s = %v, want 40", k("count", ""), n)
	}
	// Paired with the profile callback's return, each call took about
	// 6.5 µs; with its own, at least the 2 ms it sleeps.
	if n := got[k("bucket", "0.001")]; n != 0 {
		t.Errorf("%v of 40 calls under 1 ms, want none", n)
	}
	if n := got[k("bucket", "0.1")]; n != 40 {
		t.Errorf("%v of 40 calls under 100 ms, want 40", n)
	}
	if s := got[k("sum", "")]; s < 40*0.002 {
		t.Errorf("sum %v s, want at least 40 × 2 ms", s)
	}
	if n := got[`probekit_export_lost_updates_total{metric="py_call_seconds",reason="end_without_start"}`]; n < 40 {
		t.Errorf("end_without_start = %v, want at least the 40 profile callbacks' returns", n)
	}
}
