package tracer

import (
	"fmt"
	"sync"

	"github.com/probekit/probekit/attach"
	"github.com/probekit/probekit/follow"
	"github.com/probekit/probekit/record"
)

// followedSites are the USDT probes a followed trace (-f, a glob or "*"
// target, or any trace without BPF cookies) attached, by file, for the
// silent-probe hints at its end that hintSilent gives a trace attached
// at its start.
type followedSites struct {
	mu    sync.Mutex
	sites []attach.Site
	seen  map[[2]string]bool
}

// note records an Attached event's USDT probe.
func (f *followedSites) note(e follow.Event) {
	if e.Kind != follow.Attached || e.Probe == nil || e.Probe.Function != "" {
		return
	}
	k := [2]string{e.File, e.Probe.Provider + ":" + e.Probe.Name}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.seen == nil {
		f.seen = map[[2]string]bool{}
	}
	if !f.seen[k] {
		f.seen[k] = true
		f.sites = append(f.sites, attach.Site{Probe: "USDT " + k[1], Path: k[0]})
	}
}

// hintFollowed writes hintSilent's runtime hints for the probes a
// followed trace attached and that saw no hit (a Ruby, PHP or Java
// probe that fires only when switched on).
func (t *tracer) hintFollowed() {
	if t.cfg.Mode != record.ModeEvents || t.cfg.Limit > 0 && t.hits >= t.cfg.Limit {
		return
	}
	t.followed.mu.Lock()
	sites := append([]attach.Site(nil), t.followed.sites...)
	t.followed.mu.Unlock()
	hits := t.usdtHits()
	for _, h := range silentHints(sites, hits, nil, nil) {
		fmt.Fprintln(t.errOut, h)
	}
}
