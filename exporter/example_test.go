package exporter_test

import (
	"log"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/probekit/probekit/exporter"
	"github.com/probekit/probekit/probe"
	"github.com/probekit/probekit/record"
)

// An agent counts CPython's garbage collections, by generation, in its own
// registry (needs root: compile-only).
func ExampleExporter() {
	cfg := &exporter.Config{Metrics: []*exporter.Metric{{
		Name:   "py_gc_total",
		Help:   "Garbage collections started, by generation.",
		Type:   exporter.Counter,
		Probe:  &probe.Spec{Kind: record.KindUSDT, Target: "/usr/bin/python3.11", Provider: "python", Name: "gc__start"},
		Labels: []exporter.Label{{Name: "generation", Arg: probe.Arg(1)}},
	}}}
	if err := cfg.Check(); err != nil {
		log.Fatal(err)
	}
	x := exporter.New(exporter.Options{NoRuntimeMetrics: true})
	defer x.Close()
	if err := x.Apply(cfg); err != nil {
		// An *ApplyError: the metrics that failed, and why; the others
		// are served.
		log.Print(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(x)
	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	log.Fatal(http.ListenAndServe("127.0.0.1:9435", nil))
}
