package exporter_test

import (
	"bytes"
	"log"
	"strings"
	"testing"

	"github.com/probekit/probekit/exporter"
	"github.com/probekit/probekit/internal/features"
	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/probe"
	"github.com/probekit/probekit/record"
)

// TestPathWidePIEWithoutCookie: on a kernel without BPF cookies (before
// Linux 5.15; forced off on newer kernels) a metric on a USDT probe of a
// position-independent executable, which the exporter attaches
// path-wide, is not attached, and the log says why in one line: the
// metric, path-wide, the feature and its release.
func TestPathWidePIEWithoutCookie(t *testing.T) {
	testkit.RequireKernel(t)
	defer features.ForceOff(features.Cookie)()
	fixture := privateFixture(t, "usdt_sample")
	cfg := &exporter.Config{Metrics: []*exporter.Metric{{
		Name: "pie_loops_total", Help: "Loops.", Type: exporter.Counter,
		Probe: &probe.Spec{Kind: record.KindUSDT, Target: fixture, Provider: "sample", Name: "loop"},
	}}}
	if err := cfg.Check(); err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	x := exporter.New(exporter.Options{NoRuntimeMetrics: true, Log: log.New(&logged, "", 0)})
	defer x.Close()
	x.Apply(cfg)
	if got := x.Attached(); len(got) != 0 {
		t.Fatalf("attached %v, want none", got)
	}
	lines := strings.Split(strings.TrimSpace(logged.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("log %q, want one line", logged.String())
	}
	for _, want := range []string{"pie_loops_total", "path-wide", "position-independent", features.Cookie.String()} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("log line %q does not say %q", lines[0], want)
		}
	}
}
