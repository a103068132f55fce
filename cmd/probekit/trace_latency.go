package main

import (
	"fmt"
	"sync"

	"github.com/probekit/probekit/probe"
	"github.com/probekit/probekit/record"
	"github.com/probekit/probekit/usdt"
)

// probekit trace --latency: the time from a start hit to its end hit,
// paired per thread as a stack in the kernel (record.ModeLatency), as a
// log2 histogram of nanoseconds per start probe or per --by key.
//
//	--latency uprobe:TARGET:FUNC   FUNC's entry to its return (a uprobe and
//	                               a uretprobe, or return-site probes on Go)
//	--latency START END            two probes (USDT or function): each hit
//	                               of END ends its thread's latest START
//
// The filter and the keys are taken at the start: a function's
// arguments at its entry, the START probe's arguments; probe and func
// name the start. Functions of Go code pair per goroutine, the others per
// thread.

// latencyState is what a --latency trace keeps: which sites are ends.
type latencyState struct {
	mu   sync.Mutex
	ends map[uint64]bool // site indexes of END probes
}

func (l *latencyState) markEnd(site uint64) {
	l.mu.Lock()
	l.ends[site] = true
	l.mu.Unlock()
}

func (l *latencyState) isEnd(site int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ends[uint64(site)]
}

// latencyProbes checks --latency's probes and makes req.probes the starts
// then the ends: a function probe gains its return.
func (req *traceRequest) latencyProbes() error {
	switch n := len(req.probes); {
	case n == 1 && req.probes[0].Kind == record.KindUprobe:
		end := req.probes[0]
		end.Kind = record.KindUretprobe
		req.probes = append(req.probes, end)
	case n == 1 && req.probes[0].Kind == record.KindUSDT:
		return usagef("--latency of one probe times a function from entry to return, and a USDT probe has no return: give two, --latency START END")
	case n == 1:
		return usagef("--latency of one probe times a function from its entry: give uprobe:TARGET:FUNC")
	case n == 2:
		if req.probes[0] == req.probes[1] {
			return usagef("--latency START END: START and END are the same probe")
		}
	default:
		return usagef("--latency takes one function probe (uprobe:TARGET:FUNC) or two probes (START END), not %d", n)
	}
	req.latEnd = 1
	return nil
}

// startProbes are the probes whose values the filter and the keys read:
// every probe, or --latency's START.
func (req *traceRequest) startProbes() []probe.Spec {
	if req.mode == record.ModeLatency {
		return req.probes[:req.latEnd]
	}
	return req.probes
}

// atStart completes a message on the values of the filter or the keys:
// --latency reads them at the start.
func (req *traceRequest) atStart() string {
	if req.mode != record.ModeLatency {
		return ""
	}
	return "; --latency reads them at the start, " + probeName(req.probes[0])
}

// latencyEnd reports whether p is --latency's END.
func (t *tracer) latencyEnd(p probe.Spec) bool {
	if t.req.mode != record.ModeLatency {
		return false
	}
	for _, e := range t.req.probes[t.req.latEnd:] {
		if e == p {
			return true
		}
	}
	return false
}

// latencyCookie is cookie, or for the END probe p, cookie with the end
// bit, its sites marked as ends.
func (t *tracer) latencyCookie(p probe.Spec, cookie func(*usdt.Probe, int) uint64) func(*usdt.Probe, int) uint64 {
	if !t.latencyEnd(p) {
		return cookie
	}
	return func(pr *usdt.Probe, i int) uint64 {
		c := cookie(pr, i)
		t.lat.markEnd(c)
		return c | record.LatencyEnd
	}
}

// latencyOptions are the attach options of USDT probe p.
func (t *tracer) latencyOptions(p probe.Spec, opts *usdt.Options) *usdt.Options {
	if !t.latencyEnd(p) {
		return opts
	}
	o := *opts
	o.LocationCookie = t.latencyCookie(p, opts.LocationCookie)
	return &o
}

// funcLatencyCookie is the cookie of function site site of probe p; a
// function of Go code (goABI) pairs per goroutine.
func (t *tracer) funcLatencyCookie(p probe.Spec, site int, cookie uint64, goABI bool) uint64 {
	if t.req.mode != record.ModeLatency {
		return cookie
	}
	if goABI {
		cookie |= record.LatencyGoroutine
	}
	if !t.latencyEnd(p) {
		return cookie
	}
	t.lat.markEnd(uint64(site))
	return cookie | record.LatencyEnd
}

// latencyEndName names the END in histogram headers: "return" for a
// function's own.
func (t *tracer) latencyEndName() string {
	start, end := t.req.probes[0], t.req.probes[t.req.latEnd]
	switch {
	case len(t.req.probes) == 2 && start.Kind == record.KindUprobe && end.Kind == record.KindUretprobe && start.Func == end.Func && start.Target == end.Target:
		return "return"
	}
	return probeName(end)
}

// probeName names p as counts and histograms do: PROVIDER:NAME,
// uprobe:FUNC or uretprobe:FUNC.
func probeName(p probe.Spec) string {
	switch p.Kind {
	case record.KindUSDT:
		return p.Provider + ":" + p.Name
	case record.KindUretprobe:
		return "uretprobe:" + p.Func
	}
	return "uprobe:" + p.Func
}

// printLatency prints the histograms of the starts without --by (with
// it, printAggregate prints them per key, as for --hist --by): per start
// probe,
//
//	uprobe:lat_rec -> return (ns)
//	[8M, 16M)                3 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|
//
// and in JSON {"probe":START,"end":END,"buckets":[...]}.
func (t *tracer) printLatency(objs *record.Objects) error {
	b := t.out.buf[:0]
	totals, err := t.totals(objs)
	if err != nil {
		return err
	}
	starts := map[string]bool{}
	if t.sitesMu != nil {
		t.sitesMu.RLock()
	}
	for i, s := range t.sites {
		if !s.skipped && !t.lat.isEnd(i) {
			starts[s.label] = true
		}
	}
	if t.sitesMu != nil {
		t.sitesMu.RUnlock()
	}
	end := t.latencyEndName()
	n := 0
	for _, p := range totals {
		if !starts[p.label] {
			continue
		}
		if t.req.json {
			b = append(b, `{"probe":`...)
			b = appendJSON(b, p.label, false)
			b = append(b, `,"end":`...)
			b = appendJSON(b, end, false)
			b = appendBucketsJSON(b, &p.hist)
			continue
		}
		if n > 0 {
			b = append(b, '\n')
		}
		n++
		b = appendHistText(b, p.label+" -> "+end+" (ns)", &p.hist)
	}
	return t.flushAggregate(b)
}

// reportLatencyLost says on standard error what the kernel could not
// time.
func (t *tracer) reportLatencyLost(objs *record.Objects) {
	l, err := objs.LatencyLost()
	if err != nil {
		t.warnf("%v", err)
		return
	}
	if l.Deep > 0 {
		fmt.Fprintf(t.errOut, "probekit trace: %d starts not timed: nested deeper than %d on their thread\n", l.Deep, record.MaxLatencyDepth)
	}
	if l.NoStart > 0 {
		fmt.Fprintf(t.errOut, "probekit trace: %d ends without a start on their thread (begun before the trace, or unpaired)\n", l.NoStart)
	}
	if l.Full > 0 {
		fmt.Fprintf(t.errOut, "probekit trace: %d starts not timed: no room for their thread's stack (%d threads) or key\n", l.Full, record.LatencyThreads)
	}
}
