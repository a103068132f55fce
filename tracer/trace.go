package tracer

import (
	"context"
	"errors"
	"io"
	"slices"

	"github.com/probekit/probekit/internal/privilege"
	"github.com/probekit/probekit/record"
)

// Start carries out cfg as Run does, and returns once every probe is
// attached: in Config.Process, in the launched Config.Command (which it
// then lets run), or in every process that maps the probes' files. A
// workload started after Start returns misses no hit. With Follow or a
// "*" or glob target, the processes and objects that come later are
// attached as they come, as with Run.
//
// The trace then runs on its own until ctx is done, the traced process
// or command exits, Limit is reached, or Stop is called; Done is closed
// then, and Wait reports and detaches. Counts, Sites and Warnings read
// the trace while it runs. OnHit and OnProfile are called from the
// trace's own goroutine.
//
// Unlike Run, Start prints nothing where Config.Output is nil: a Go
// program reads the Trace instead, and sets no output field. Warnings
// still go to Config.Warnings (os.Stderr when nil), and Warnings keeps
// them. Call Stop or Wait once: until then, the probes stay attached.
func Start(ctx context.Context, cfg *Config) (*Trace, error) {
	return start(ctx, cfg, io.Discard)
}

// Wait waits for the end of the trace (ctx done, the traced process or
// command gone, Limit reached, or Stop), then gives the end-of-trace
// notes to Config.Warnings, detaches everything, ends a launched command
// that outlives the trace, and returns the trace's error, as Run does.
// Later calls return the same error.
func (tr *Trace) Wait() error {
	<-tr.done
	tr.endOnce.Do(func() { tr.err = tr.end() })
	return tr.err
}

// Stop ends the trace: the hits fired before it are all read (OnHit gets
// them, the counts hold them), then it is Wait. It may be called more
// than once, and after the trace ended by itself; each call returns
// Wait's error.
func (tr *Trace) Stop() error {
	tr.stopOnce.Do(func() { close(tr.drain) })
	return tr.Wait()
}

// Close is Stop, for an io.Closer.
func (tr *Trace) Close() error { return tr.Stop() }

// Done is closed when the trace has ended by itself or by Stop; Wait
// then returns at once.
func (tr *Trace) Done() <-chan struct{} { return tr.done }

// end is Wait's once: the report phase, the final counts, then the
// release of everything the phases took.
func (tr *Trace) end() error {
	err := tr.loopErr
	if err == nil {
		err = tr.report()
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.final, tr.finalErr = tr.counts()
	tr.ended = true
	return privilege.Explain("tracing", tr.release(err))
}

// Count is the hits of one probe so far.
type Count struct {
	// Probe is the probe's Site.Label: PROVIDER:NAME, uprobe:FUNC or
	// uretprobe:FUNC; its sites add up.
	Probe string
	// Hits is how many hits the trace read (ModeEvents: the hits given
	// to OnHit or printed) or the kernel counted (ModeCount, ModeHist:
	// the values counted in the histogram).
	Hits uint64
}

// ErrKeyed is Counts' error for a trace that counts by Keys or times
// latencies: its counts are by key, printed (or given to OnProfile), not
// by probe.
var ErrKeyed = errors.New("tracer: counted by key, not by probe")

// Counts returns the hits of each probe so far, in the order of their
// first site; after the end, the final counts. With Keys or ModeLatency
// it returns ErrKeyed.
func (tr *Trace) Counts() ([]Count, error) {
	tr.mu.RLock()
	defer tr.mu.RUnlock()
	if tr.ended {
		return slices.Clone(tr.final), tr.finalErr
	}
	return tr.counts()
}

// counts reads the counts; tr.mu is held.
func (tr *Trace) counts() ([]Count, error) {
	t, cfg := tr.t, tr.plan.cfg
	switch {
	case len(cfg.Keys) > 0 || cfg.Mode == record.ModeLatency:
		return nil, ErrKeyed
	case cfg.Mode == record.ModeEvents:
		if t.sitesMu != nil {
			t.sitesMu.RLock()
			defer t.sitesMu.RUnlock()
		}
		var out []Count
		index := map[string]int{}
		for i := range t.sites {
			s := &t.sites[i]
			if s.skipped {
				continue
			}
			j, ok := index[s.Label]
			if !ok {
				j = len(out)
				index[s.Label] = j
				out = append(out, Count{Probe: s.Label})
			}
			out[j].Hits += uint64(s.hitCount())
		}
		return out, nil
	}
	totals, err := t.totals(tr.objs)
	if err != nil {
		return nil, err
	}
	out := make([]Count, len(totals))
	for i, p := range totals {
		out[i] = Count{Probe: p.label, Hits: p.count}
		for _, c := range p.hist {
			out[i].Hits += c
		}
	}
	return out, nil
}

// Sites returns the sites attached so far: a USDT probe's locations and
// the functions of uprobes, each once (their public fields).
func (tr *Trace) Sites() []Site {
	t := tr.t
	if t.sitesMu != nil {
		t.sitesMu.RLock()
		defer t.sitesMu.RUnlock()
	}
	out := make([]Site, 0, len(t.sites))
	for i := range t.sites {
		s := &t.sites[i]
		if s.skipped {
			continue
		}
		out = append(out, Site{Kind: s.Kind, Label: s.Label, Provider: s.Provider, Name: s.Name,
			Function: s.Function, Address: s.Address, Location: s.Location})
	}
	return out
}

// Warnings returns the warnings and end-of-trace notes written to
// Config.Warnings so far, a line each, without their newline.
func (tr *Trace) Warnings() []string {
	return tr.t.errOut.kept()
}
