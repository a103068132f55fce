package main

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/probekit/probekit/exporter"
	"github.com/probekit/probekit/internal/test/testkit"
)

// countFDs is the number of open descriptors of this process.
func countFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// largeProbes are the probes of largeConfig's metric i, by i%5, and
// the fixture's probe each fires on (testkit.Process.Loop): two fifths
// of the metrics count sample:loop (more than MaxSiteMetrics of 1,000:
// two attachments of it), the others fire_loop's entry and return
// (which fire with sample:loop), and sample:zero. Without function
// probes (funcs false: no BPF cookies, where a USDT probe takes at most
// MaxSiteMetrics metrics of a group) each fifth has its own USDT probe.
func largeProbes(fixture string, funcs bool) (probes, fires []string) {
	if !funcs {
		fires = []string{"loop", "zero", "sizes", "consts", "mem"}
		for _, f := range fires {
			probes = append(probes, fixture+":sample:"+f)
		}
		return probes, fires
	}
	return []string{
		fixture + ":sample:loop",
		fixture + ":sample:loop",
		"uprobe:" + fixture + ":fire_loop",
		"uretprobe:" + fixture + ":fire_loop",
		fixture + ":sample:zero",
	}, []string{"loop", "loop", "loop", "loop", "zero"}
}

// largeConfig is a configuration of n counters of the fixture.
func largeConfig(fixture string, n int, funcs bool) string {
	probes, _ := largeProbes(fixture, funcs)
	var b strings.Builder
	b.WriteString("metrics:\n")
	for i := range n {
		fmt.Fprintf(&b, "  - name: m%d_total\n    type: counter\n    probe: %s\n", i, probes[i%len(probes)])
	}
	return b.String()
}

// TestExportLargeConfig: 1,000 counters on four probes are attached and
// served in under 5 s (issue 21 item 4), each counts its probe's hits
// exactly, they hold few descriptors (metrics that share a probe share
// its program and link), and Close releases them in under 1 s. Without
// BPF cookies, where function metrics are refused (TestExportFunc), the
// function's metrics count its USDT probe instead.
func TestExportLargeConfig(t *testing.T) {
	testkit.RequireKernel(t)
	const n = 1000
	funcs := funcProbes(t)
	fixture := privateFixture(t, "usdt_sample")
	p := testkit.Start(t, fixture)
	cfg, err := exporter.ParseConfig("large.yaml", []byte(largeConfig(fixture, n, funcs)), exporter.ParseProbe)
	if err != nil {
		t.Fatal(err)
	}
	fds := countFDs(t)
	start := time.Now()
	x := exporter.New(exporter.Options{})
	closed := false
	defer func() {
		if !closed {
			x.Close()
		}
	}()
	x.Apply(cfg)
	_, addr, err := x.Serve("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := time.Since(start)
	held := countFDs(t) - fds
	t.Logf("%d counters served in %v, holding %d descriptors (%.2f per metric)", n, served, held, float64(held)/n)
	if got := len(x.Attached()); got != n {
		t.Fatalf("%d metrics attached, want %d", got, n)
	}
	// Under 5 s on hardware. In the VM matrix (-short), under emulation
	// about ten times slower, Debian's 6.1 took 7.5 s: there the bound is
	// ten times as long.
	limit := 5 * time.Second
	if testing.Short() {
		limit *= 10
	}
	if served > limit {
		t.Errorf("served after %v, want under %v", served, limit)
	}
	if held > n/10 {
		t.Errorf("%d descriptors held for %d metrics, want at most %d", held, n, n/10)
	}

	// Each probe fired a number of times of its own.
	probes, fires := largeProbes(fixture, funcs)
	rounds := map[string]int{"loop": 7, "zero": 3, "sizes": 5, "consts": 4, "mem": 2}
	for f, r := range rounds {
		if err := p.Loop(f, r); err != nil {
			t.Fatal(err)
		}
	}
	got := scrape(t, "http://"+addr.String()+"/metrics")
	for i := range n {
		want := float64(rounds[fires[i%len(fires)]])
		name := fmt.Sprintf("m%d_total", i)
		if got[name] != want {
			t.Errorf("%s = %v, want %v", name, got[name], want)
		}
	}

	// A reload that replaces all but two metrics: the two keep their
	// counts, the new ones count from the reload on.
	var b strings.Builder
	b.WriteString("metrics:\n")
	for i := range n {
		name := fmt.Sprintf("n%d_total", i)
		if i < 2 {
			name = fmt.Sprintf("m%d_total", i)
		}
		fmt.Fprintf(&b, "  - name: %s\n    type: counter\n    probe: %s\n", name, probes[i%len(probes)])
	}
	cfg, err = exporter.ParseConfig("large.yaml", []byte(b.String()), exporter.ParseProbe)
	if err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	x.Apply(cfg)
	reloaded := time.Since(start)
	t.Logf("reload replacing %d metrics in %v, holding %d descriptors", n-2, reloaded, countFDs(t)-fds)
	if got := len(x.Attached()); got != n {
		t.Fatalf("%d metrics attached after the reload, want %d", got, n)
	}
	if reloaded > limit {
		t.Errorf("reloaded in %v, want under %v", reloaded, limit)
	}
	if err := p.Loop("loop", 2); err != nil {
		t.Fatal(err)
	}
	got = scrape(t, "http://"+addr.String()+"/metrics")
	// Fired on sample:loop: m0 and n5 by i%5 == 0, m1 by 1 (with
	// cookies, n2 too); not n999 (4).
	want := map[string]float64{"m0_total": 7 + 2, "m1_total": float64(rounds[fires[1]]), "n2_total": 0, "n5_total": 2, "n999_total": 0}
	if fires[1] == "loop" {
		want["m1_total"] += 2
	}
	if fires[2] == "loop" {
		want["n2_total"] = 2
	}
	for name, want := range want {
		if got[name] != want {
			t.Errorf("after the reload: %s = %v, want %v", name, got[name], want)
		}
	}
	if _, ok := got["m5_total"]; ok {
		t.Error("m5_total served after the reload dropped it")
	}

	start = time.Now()
	if err := x.Close(); err != nil {
		t.Error(err)
	}
	closed = true
	stopped := time.Since(start)
	t.Logf("stopped in %v", stopped)
	if stopped > time.Second {
		t.Errorf("stopped after %v, want under 1 s", stopped)
	}
	if left := countFDs(t) - fds; left > 0 {
		t.Errorf("%d descriptors left after Close", left)
	}
}
