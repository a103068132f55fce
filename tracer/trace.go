package tracer

import (
	"context"
	"errors"
	"io"
	"slices"

	"github.com/probekit/probekit/internal/privilege"
	"github.com/probekit/probekit/profile"
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
// them. Until Stop or Wait is called, the probes stay attached.
func Start(ctx context.Context, cfg *Config) (*Trace, error) {
	tr, err := start(ctx, cfg, io.Discard)
	if err != nil {
		return nil, err
	}
	tr.live = true
	return tr, nil
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
// Wait's error. Neither Stop nor Wait may be called from OnHit or
// OnProfile, which run in the loop they wait for: an error returned
// there ends the trace.
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
	if tr.live {
		// Read once more for Counts, Histograms and Profile, which only
		// Start's caller can call.
		tr.final = tr.snapshot()
	}
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
		return slices.Clone(tr.final.counts), tr.final.countsErr
	}
	return tr.counts()
}

// Histogram is the histogram of one probe's values so far (ModeHist).
type Histogram struct {
	// Probe is the probe's Site.Label; its sites add up.
	Probe string
	// Buckets are the counts by log2 bucket (record.BucketRange).
	Buckets record.Histogram
}

// ErrMode is the error of a reading that the trace's mode does not make:
// Histograms without ModeHist, Profile without ModeCount and a stack key.
var ErrMode = errors.New("tracer: not counted in this mode")

// Histograms returns the histogram of each probe so far (ModeHist), in
// the order of their first site; after the end, the final ones. With
// Keys it returns ErrKeyed, in another mode ErrMode.
func (tr *Trace) Histograms() ([]Histogram, error) {
	tr.mu.RLock()
	defer tr.mu.RUnlock()
	if tr.ended {
		return slices.Clone(tr.final.hists), tr.final.histsErr
	}
	return tr.histograms()
}

// Profile returns the stacks counted so far (ModeCount with Stack or a
// stack key) as a pprof profile, as OnProfile gets it; after the end,
// the final one. In another mode it returns ErrMode.
func (tr *Trace) Profile() (*profile.Profile, error) {
	tr.mu.RLock()
	defer tr.mu.RUnlock()
	if tr.ended {
		return tr.final.prof, tr.final.profErr
	}
	return tr.profile()
}

// finalState is what the live readings return once the maps are gone.
type finalState struct {
	counts    []Count
	countsErr error
	hists     []Histogram
	histsErr  error
	prof      *profile.Profile
	profErr   error
}

// snapshot reads, before the release, what the trace's mode counts.
func (tr *Trace) snapshot() finalState {
	var f finalState
	f.counts, f.countsErr = tr.counts()
	f.hists, f.histsErr = tr.histograms()
	f.prof, f.profErr = tr.profile()
	return f
}

// histograms reads the histograms; tr.mu is held.
func (tr *Trace) histograms() ([]Histogram, error) {
	cfg := tr.plan.cfg
	switch {
	case cfg.Mode != record.ModeHist:
		return nil, ErrMode
	case len(cfg.Keys) > 0:
		return nil, ErrKeyed
	}
	totals, err := tr.t.totals(tr.objs)
	if err != nil {
		return nil, err
	}
	out := make([]Histogram, len(totals))
	for i, p := range totals {
		out[i] = Histogram{Probe: p.label, Buckets: p.hist}
	}
	return out, nil
}

// profile builds the profile; tr.mu is held.
func (tr *Trace) profile() (*profile.Profile, error) {
	if cfg := tr.plan.cfg; cfg.Mode != record.ModeCount || !cfg.HasStackKey() {
		return nil, ErrMode
	}
	return tr.t.stackProfile(tr.objs)
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
