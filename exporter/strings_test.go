package exporter_test

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/probekit/probekit/exporter"
	"github.com/probekit/probekit/internal/features"
	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/probe"
	"github.com/probekit/probekit/record"
)

// TestColdStringLabel: a string label in a page the process has not
// touched yet (testdata/params/strings.c drops cold_label's page before
// each call of cold) is read where the kernel runs sleepable uprobe
// programs, so every hit is counted under "cold-rodata"; elsewhere (the
// feature forced off, as on Linux before 6.0) each hit is counted as
// value_unreadable, never under a wrong label.
func TestColdStringLabel(t *testing.T) {
	testkit.RequireKernel(t)
	if runtime.GOARCH != "amd64" {
		t.Skip("the fixture is built for x86-64")
	}
	// A function metric reads its site's BPF cookie (Linux 5.15); without
	// cookies it is refused (TestFuncMetricRefusedWithoutCookie).
	cookie, err := features.Have(features.Cookie)
	testkit.NeedFeature(t, cookie, err, features.Cookie.Since(), features.Cookie.String())
	const rounds = 5
	fx := filepath.Join(testkit.Root(), "testdata", "params", "bin", "strings")
	run := func(t *testing.T) map[string]float64 {
		pr := &probe.Spec{Kind: record.KindUprobe, Target: fx, Func: "cold"}
		_, reg := start(t, &exporter.Config{Metrics: []*exporter.Metric{
			{Name: "cold_total", Type: exporter.Counter, Probe: pr, Labels: []exporter.Label{{Name: "label", Arg: probe.Arg(2), String: true}}},
		}})
		if out, err := exec.Command(fx, "5").CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", fx, err, out)
		}
		return gather(t, reg, "")
	}
	t.Run("faulting", func(t *testing.T) {
		ok, err := features.Have(features.SleepableUprobe)
		testkit.NeedFeature(t, ok, err, features.SleepableUprobe.Since(), features.SleepableUprobe.String())
		got := run(t)
		if n := got[`cold_total{label="cold-rodata"}`]; n != rounds {
			t.Errorf(`cold_total{label="cold-rodata"} = %v, want %d: %v`, n, rounds, got)
		}
	})
	t.Run("forced-off", func(t *testing.T) {
		defer features.ForceOff(features.SleepableUprobe)()
		got := run(t)
		if n := got[`cold_total{label="cold-rodata"}`]; n != 0 {
			t.Errorf("read %v cold labels without faulting reads: the test's page is not cold", n)
		}
		if n := got[`probekit_export_lost_updates_total{metric="cold_total",reason="value_unreadable"}`]; n != rounds {
			t.Errorf("value_unreadable = %v, want %d: %v", n, rounds, got)
		}
	})
}
