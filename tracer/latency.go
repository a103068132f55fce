package tracer

import (
	"errors"
	"fmt"
	"sync"

	"github.com/cilium/ebpf"

	"github.com/probekit/probekit/internal/jsontext"
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

// PairLatency makes the probes of ModeLatency the starts then the ends,
// and sets LatencyEnd: one function probe gains its return as its end;
// two probes are START and END.
func (cfg *Config) PairLatency() error {
	switch n := len(cfg.Probes); {
	case n == 1 && cfg.Probes[0].Kind == record.KindUprobe:
		end := cfg.Probes[0]
		end.Kind = record.KindUretprobe
		cfg.Probes = append(cfg.Probes, end)
	case n == 1 && cfg.Probes[0].Kind == record.KindUSDT:
		return errors.New("--latency of one probe times a function from entry to return, and a USDT probe has no return: give two, --latency START END")
	case n == 1:
		return errors.New("--latency of one probe times a function from its entry: give uprobe:TARGET:FUNC")
	case n == 2:
		if cfg.Probes[0] == cfg.Probes[1] {
			return errors.New("--latency START END: START and END are the same probe")
		}
	default:
		return fmt.Errorf("--latency takes one function probe (uprobe:TARGET:FUNC) or two probes (START END), not %d", n)
	}
	cfg.LatencyEnd = 1
	return nil
}

// latencyEnd reports whether p is --latency's END.
func (t *tracer) latencyEnd(p probe.Spec) bool {
	if t.cfg.Mode != record.ModeLatency {
		return false
	}
	for _, e := range t.cfg.Probes[t.cfg.LatencyEnd:] {
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
	if t.cfg.Mode != record.ModeLatency {
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
	start, end := t.cfg.Probes[0], t.cfg.Probes[t.cfg.LatencyEnd]
	switch {
	case len(t.cfg.Probes) == 2 && start.Kind == record.KindUprobe && end.Kind == record.KindUretprobe && start.Func == end.Func && start.Target == end.Target:
		return "return"
	}
	return end.Label()
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
			starts[s.Label] = true
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
		if t.cfg.JSON {
			b = append(b, `{"probe":`...)
			b = jsontext.Append(b, p.label, false)
			b = append(b, `,"end":`...)
			b = jsontext.Append(b, end, false)
			b = appendBucketsJSON(b, &p.hist)
			continue
		}
		if n > 0 {
			b = append(b, '\n')
		}
		n++
		b = appendHistText(b, Escape(p.label)+" -> "+Escape(end)+" (ns)", &p.hist)
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
	if l.Abandoned > 0 {
		fmt.Fprintf(t.errOut, "probekit trace: %d starts not timed: their end never came (a later end closed an earlier start)\n", l.Abandoned)
	}
}

// setLatencyMatch gives spec the identity arguments of cfg's --latency
// pair, when it is a known one.
func setLatencyMatch(spec *ebpf.CollectionSpec, cfg *Config) error {
	if cfg.Mode != record.ModeLatency || len(cfg.Probes) != 2 {
		return nil
	}
	s, e := cfg.Probes[0], cfg.Probes[1]
	if s.Kind != record.KindUSDT || e.Kind != record.KindUSDT {
		return nil
	}
	args := record.LatencyMatch(s.Provider+":"+s.Name, e.Provider+":"+e.Name)
	if args == nil {
		return nil
	}
	return record.SetLatencyMatch(spec, args...)
}
