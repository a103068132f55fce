package main

import (
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/probekit/probekit/internal/test/testkit"
)

// BenchmarkExportHit compares what a hit of sample:loop costs the traced
// program under a bare program that only counts (the floor of a uprobe
// with a BPF program, as BenchmarkTraceCount/bare), under an exporter
// counter, a counter with a label from an argument, and a histogram of an
// argument (16 buckets). cpu-ns/hit is the fixture's own CPU time per
// hit (the program runs in its context).
func BenchmarkExportHit(b *testing.B) {
	testkit.RequireKernel(b)
	b.Run("bare", func(b *testing.B) {
		fixture := privateFixture(b, "usdt_sample")
		p := testkit.Start(b, fixture)
		attachCount(b, p, fixture, "count_hits")
		b.ResetTimer()
		loopCPU(b, p)
	})
	for _, c := range []struct{ name, metric, sample string }{
		{"counter", "type: counter", "m"},
		{"counter_label", "type: counter\n    labels: {round: {arg: 4}}\n    max_series: 1", `m{overflow="true",round="other"}`},
		{"histogram", "type: histogram\n    value: 2", "m_count"},
	} {
		b.Run(c.name, func(b *testing.B) {
			fixture := privateFixture(b, "usdt_sample")
			p := testkit.Start(b, fixture)
			_, url := startExporter(b, fmt.Sprintf("metrics:\n  - name: m\n    probe: %s:sample:loop\n    %s\n", fixture, c.metric))
			b.ResetTimer()
			loopCPU(b, p)
			b.StopTimer()
			// The labelled counter's first round has a series of its
			// own; the others fold.
			n := scrape(b, url)[c.sample]
			if c.name == "counter_label" {
				n++
			}
			if n != float64(b.N) {
				b.Fatalf("%s = %v, want %d", c.sample, n, b.N)
			}
		})
	}
}

// BenchmarkExportScrape is the time of one scrape of 100 metrics (50
// counters, 50 histograms, each with 10 series by label and the series of
// other), as Prometheus scrapes them.
func BenchmarkExportScrape(b *testing.B) {
	testkit.RequireKernel(b)
	fixture := privateFixture(b, "usdt_sample")
	p := testkit.Start(b, fixture)
	var config strings.Builder
	config.WriteString("metrics:\n")
	for i := range 100 {
		kind := "type: counter"
		if i%2 == 1 {
			kind = "type: histogram\n    value: 2"
		}
		fmt.Fprintf(&config, "  - name: m%d\n    probe: %s:sample:loop\n    %s\n    max_series: 10\n    labels: {round: {arg: 1}}\n", i, fixture, kind)
	}
	x, url := startExporter(b, config.String())
	if n := len(x.Attached()); n != 100 {
		b.Fatalf("%d metrics attached, want 100", n)
	}
	if err := p.Loop("loop", 20); err != nil {
		b.Fatal(err)
	}
	if got := scrape(b, url); got[`m99_count{overflow="true",round="other"}`] != 10 {
		b.Fatalf(`m99_count{round="other"} = %v, want 10`, got[`m99_count{overflow="true",round="other"}`])
	}
	b.ResetTimer()
	var bytes int64
	for b.Loop() {
		resp, err := scrapeClient.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil {
			b.Fatal(err)
		}
		bytes = n
	}
	b.ReportMetric(float64(bytes), "bytes/scrape")
}
