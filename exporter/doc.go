// Package exporter counts probe hits in the kernel and serves them as
// Prometheus metrics: counters of hits, histograms of an argument or of
// the latency from one probe to another on each thread, labels read from
// arguments or from the process (pid, comm). The aggregation is in BPF
// maps; nothing is sent per hit, and the maps are read at each scrape.
//
// A configuration is a file (LoadConfig, ParseConfig: YAML, errors with
// file and line) or a Config built in Go and checked with Config.Check.
// An Exporter applies it (Apply: the metrics new to a configuration load
// as one BPF collection; a metric left unchanged by a reload keeps its
// counts; the metrics that failed are returned, the others served) and
// is a
// prometheus.Collector: an agent registers it in its own registry,
//
//	x := exporter.New(exporter.Options{NoRuntimeMetrics: true})
//	defer x.Close()
//	if err := x.Apply(cfg); err != nil {
//		log.Print(err) // *ApplyError: each metric that failed, and why
//	}
//	reg.MustRegister(x)
//
// or serves it with the Exporter's own registry (Handler, Serve), as
// cmd/probekit-export does.
//
// # Decisions
//
//   - Metrics share programs and attachments. The metrics loaded by one
//     Apply are one collection: one program per attach kind (USDT,
//     function), each metric's shape an entry of a map, and one
//     attachment per probe, whose cookie indexes the table of the
//     metrics it updates (up to MaxSiteMetrics; more take another
//     attachment of the probe); the function probes of one file, of one
//     kind (entries or returns), share one attachment too (one
//     uprobe_multi link where the kernel has it) when no function is in
//     two of them. So 1,000 metrics on a few probes cost a few links and
//     descriptors, not 1,000 collections. A metric dropped
//     by a reload stops counting at once; its probes are detached when
//     no metric of its collection uses them, except those of a "*" or
//     glob target, held by the collection's one watch until its last
//     metric goes.
//   - Latency pairs starts and ends per thread as a stack, so that nested
//     and recursive calls each end their own start. The stack holds
//     MaxDepth starts; deeper ones are counted (lost_updates, reason
//     depth_overflow), and their ends only pop the depth.
//   - A metric keeps at most MaxSeries label value combinations. A series
//     that counted nothing for SeriesIdle is evicted at a scrape
//     (probekit_export_series_evicted_total), so that label values seen
//     once do not hold their place for good. Hits past MaxSeries count in
//     one series labelled overflow="true".
//   - Serving: each scrape page is gathered once for all the requests
//     waiting for it and written from one shared buffer, so a slow or
//     stalled client costs a connection, not a copy of the page; requests
//     in flight, connections and each phase of a request are bounded
//     (MaxRequestsInFlight, MaxConnections, timeouts).
//   - The library packages under it (usdt, uprobe, follow, ...) do not
//     import the Prometheus client or YAML; only this package does.
package exporter
