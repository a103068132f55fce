package exporter_test

import (
	"bytes"
	"errors"
	"fmt"
	"log"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/probekit/probekit/exporter"
	"github.com/probekit/probekit/internal/features"
	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/probe"
	"github.com/probekit/probekit/record"
)

// TestNamedPIEWithoutCookie: on a kernel without BPF cookies (before
// Linux 5.15; forced off on newer kernels) a metric on a USDT probe of a
// position-independent executable cannot be attached path-wide; the
// exporter watches the host for it and attaches it in each process that
// maps the file, so a running process's hits are counted exactly, and
// nothing is logged.
func TestNamedPIEWithoutCookie(t *testing.T) {
	testkit.RequireKernel(t)
	defer features.ForceOff(features.Cookie)()
	fixture := privateFixture(t, "usdt_sample")
	p := testkit.Start(t, fixture)
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
	reg := prometheus.NewRegistry()
	if err := reg.Register(x); err != nil {
		t.Fatal(err)
	}
	if err := p.Loop("loop", 20); err != nil {
		t.Fatal(err)
	}
	if got := gather(t, reg, "pie_")["pie_loops_total"]; got != 20 {
		t.Errorf("pie_loops_total = %v, want 20 (log: %q)", got, logged.String())
	}
	if logged.Len() != 0 {
		t.Errorf("log %q, want nothing", logged.String())
	}
}

// TestFuncMetricRefusedWithoutCookie: without BPF cookies (before Linux
// 5.15; forced off here) a metric on a function probe is refused by
// Apply, naming the feature, and a USDT metric beside it still counts.
func TestFuncMetricRefusedWithoutCookie(t *testing.T) {
	testkit.RequireKernel(t)
	defer features.ForceOff(features.Cookie)()
	fixture := privateFixture(t, "usdt_sample")
	p := testkit.Start(t, fixture)
	cfg := &exporter.Config{Metrics: []*exporter.Metric{
		{Name: "usdt_loops_total", Help: "Loops.", Type: exporter.Counter,
			Probe: &probe.Spec{Kind: record.KindUSDT, Target: fixture, Provider: "sample", Name: "loop"}},
		{Name: "func_loops_total", Help: "Calls.", Type: exporter.Counter,
			Probe: &probe.Spec{Kind: record.KindUprobe, Target: fixture, Func: "fire_loop"}},
	}}
	if err := cfg.Check(); err != nil {
		t.Fatal(err)
	}
	x := exporter.New(exporter.Options{NoRuntimeMetrics: true})
	defer x.Close()
	err := x.Apply(cfg)
	if err == nil || !strings.Contains(err.Error(), "func_loops_total") || !strings.Contains(err.Error(), "BPF cookie (Linux 5.15)") || strings.Contains(err.Error(), "usdt_loops_total") {
		t.Errorf("Apply: %v; want the function metric refused, naming BPF cookies", err)
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(x); err != nil {
		t.Fatal(err)
	}
	if err := p.Loop("loop", 20); err != nil {
		t.Fatal(err)
	}
	if got := gather(t, reg, "usdt_")["usdt_loops_total"]; got != 20 {
		t.Errorf("usdt_loops_total = %v, want 20", got)
	}
}

// funcRefusal is what Apply says of a metric on a function probe
// without BPF cookies.
const funcRefusal = "function probes: not supported: BPF cookie (Linux 5.15)"

// funcProbes reports whether metrics on function probes attach here:
// the kernel has BPF cookies. Without them (a kernel before 5.15, or
// forced off), the test checks the refusal (funcRefused) instead.
func funcProbes(t *testing.T) bool {
	t.Helper()
	ok, err := features.Have(features.Cookie)
	if err != nil {
		t.Fatal(err)
	}
	if !ok && !features.Forced(features.Cookie) {
		testkit.MissingFeature(t, features.Cookie.Since(), features.Cookie.String())
	}
	return ok
}

// funcRefused checks that Apply refuses each of ms, naming it and
// funcRefusal, and attaches none of them.
func funcRefused(t *testing.T, ms ...*exporter.Metric) {
	t.Helper()
	cfg := &exporter.Config{Metrics: ms}
	if err := cfg.Check(); err != nil {
		t.Fatal(err)
	}
	x := exporter.New(exporter.Options{NoRuntimeMetrics: true})
	defer x.Close()
	err := x.Apply(cfg)
	var aerr *exporter.ApplyError
	if !errors.As(err, &aerr) || len(aerr.Failed) != len(ms) {
		t.Fatalf("Apply: %v; want each of %d function metrics refused", err, len(ms))
	}
	for i, f := range aerr.Failed {
		if f.Metric != ms[i].Name || !strings.Contains(f.Error(), funcRefusal) {
			t.Errorf("Apply refused %s: %v; want %s refused with %q", f.Metric, f, ms[i].Name, funcRefusal)
		}
	}
	if a := x.Attached(); len(a) != 0 {
		t.Errorf("attached %v, want none", a)
	}
}

// TestSiteFullWithoutCookie: without BPF cookies a USDT location finds
// its site by address, so one probe has one site in a group: of
// MaxSiteMetrics+1 counters on one probe, the last is refused naming
// the feature, and the others count every hit (before, it was attached
// and counted nothing).
func TestSiteFullWithoutCookie(t *testing.T) {
	testkit.RequireKernel(t)
	defer features.ForceOff(features.Cookie)()
	fixture := privateFixture(t, "usdt_sample")
	p := testkit.Start(t, fixture)
	cfg := &exporter.Config{}
	for i := range exporter.MaxSiteMetrics + 1 {
		cfg.Metrics = append(cfg.Metrics, &exporter.Metric{Name: fmt.Sprintf("m%d_total", i), Type: exporter.Counter,
			Probe: &probe.Spec{Kind: record.KindUSDT, Target: fixture, Provider: "sample", Name: "loop"}})
	}
	if err := cfg.Check(); err != nil {
		t.Fatal(err)
	}
	x := exporter.New(exporter.Options{NoRuntimeMetrics: true})
	defer x.Close()
	err := x.Apply(cfg)
	var aerr *exporter.ApplyError
	last := fmt.Sprintf("m%d_total", exporter.MaxSiteMetrics)
	if !errors.As(err, &aerr) || len(aerr.Failed) != 1 || aerr.Failed[0].Metric != last ||
		!strings.Contains(err.Error(), "more than 256 metrics on one USDT probe") || !strings.Contains(err.Error(), "BPF cookie (Linux 5.15)") {
		t.Fatalf("Apply: %v; want %s refused, naming BPF cookies", err, last)
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(x); err != nil {
		t.Fatal(err)
	}
	if err := p.Loop("loop", 3); err != nil {
		t.Fatal(err)
	}
	got := gather(t, reg, "m")
	for i := range exporter.MaxSiteMetrics {
		if name := fmt.Sprintf("m%d_total", i); got[name] != 3 {
			t.Errorf("%s = %v, want 3", name, got[name])
		}
	}
}
