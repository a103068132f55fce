package tracer

import (
	"debug/elf"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/probekit/probekit/attach"
	"github.com/probekit/probekit/internal/safeelf"
	"github.com/probekit/probekit/procmaps"
	"github.com/probekit/probekit/record"
	"github.com/probekit/probekit/semaphore"
)

// runtimeGuide is the page that says what each runtime's probes need.
const runtimeGuide = "docs/runtimes.md"

// runtimeGate is a runtime that compiles probes in but keeps some of them
// silent until asked.
type runtimeGate struct {
	runtime string
	// prefixes match the base name of the file holding the probes (the
	// interpreter or its library).
	prefixes []string
	// probes are the gated probes, provider:name.
	probes []string
	// needs is what makes them fire.
	needs string
}

// runtimeGates lists what each runtime's gated probes need, as measured on
// Debian 12's packages (docs/runtimes.md has the commands). CPython 3.11
// reaches function__entry and line only while tracing (its use_tracing
// flag); Ruby 3.1 fires method__entry/return only from a TracePoint hook
// (cmethod__entry fires without one); PHP 8.2 runs its DTrace executor,
// where function, execute, compile, error and exception probes sit, only
// with USE_ZEND_DTRACE set; HotSpot's method, allocation and monitor
// probes test -XX:+ExtendedDTraceProbes in code (they have no semaphore).
var runtimeGates = []runtimeGate{
	{"CPython", []string{"python", "libpython"}, []string{"python:function__entry", "python:line"},
		"a profile or trace function set in the process (sys.setprofile or sys.settrace)"},
	{"Ruby", []string{"ruby", "libruby"}, []string{"ruby:method__entry", "ruby:method__return"},
		"a TracePoint on :call (:return for method__return) enabled in the process"},
	{"PHP", []string{"php", "libphp"}, []string{"php:function__entry", "php:function__return",
		"php:execute__entry", "php:execute__return", "php:compile__file__entry", "php:compile__file__return",
		"php:error", "php:exception__thrown", "php:exception__caught"},
		"the environment variable USE_ZEND_DTRACE=1 in the process"},
	{"OpenJDK", []string{"libjvm"}, []string{"hotspot:method__entry", "hotspot:method__return",
		"hotspot:object__alloc", "hotspot:monitor__contended__enter", "hotspot:monitor__contended__entered",
		"hotspot:monitor__contended__exit", "hotspot:monitor__wait", "hotspot:monitor__waited",
		"hotspot:monitor__notify", "hotspot:monitor__notifyAll"},
		"the JVM option -XX:+ExtendedDTraceProbes"},
}

// gateOf returns the gate of probe (provider:name) in the file at path,
// or nil when it is not a known runtime's gated probe.
func gateOf(path, probe string) *runtimeGate {
	base := filepath.Base(path)
	for i := range runtimeGates {
		g := &runtimeGates[i]
		if slices.Contains(g.probes, probe) && slices.ContainsFunc(g.prefixes, func(p string) bool { return strings.HasPrefix(base, p) }) {
			return g
		}
	}
	return nil
}

// hintSilent writes a line to w for each gated probe of a known runtime
// that the trace attached and that saw no hit, naming what it needs and
// the guide, and for each silent probe whose semaphore proc (the traced
// process, nil for none) has at 0 although the probe is attached: that is
// another tracer's doing, not the runtime's. closed are the runtimes
// whose gate setters a launched command was watched for (watchGates):
// true when it called none, and then their gated probes get the hint
// even with hits, in every mode (CPython fires function__entry for a
// few frames without a profile function: those entered from C). Without
// that it says nothing when the trace could not tell: hits counted in
// the kernel (--count, --hist); and never for a trace cut short by -n.
//
// launched is the program of -- CMD traced without -f, "" otherwise: when
// the trace saw no hit at all, a program target other than it was run
// by a child, which the trace does not follow, and that is what the
// hint says.
func (t *tracer) hintSilent(w io.Writer, links []*attach.Link, proc *procmaps.Process, launched string, closed map[*runtimeGate]bool) {
	events := t.cfg.Mode == record.ModeEvents
	if t.cfg.Limit > 0 && t.hits >= t.cfg.Limit || !events && !anyClosed(closed) {
		return
	}
	var sites []attach.Site
	for _, l := range links {
		sites = append(sites, l.Sites()...)
	}
	if events && launched != "" && t.hits == 0 {
		var hints []string
		sites, hints = notFollowed(sites, launched, t.cfg.Command[0])
		for _, h := range hints {
			fmt.Fprintln(w, h)
		}
	}
	if t.otherCommand {
		// The warning at the start said why: the command runs
		// another file than the one with the probes.
		return
	}
	var hits map[string]int // nil: not counted per probe here
	var lowered map[string]int
	if events {
		hits = t.usdtHits()
		lowered = loweredSemaphores(proc, sites, hits)
	}
	for _, h := range silentHints(sites, hits, lowered, closed) {
		fmt.Fprintln(w, h)
	}
}

// anyClosed reports whether closed holds a gate that stayed closed.
func anyClosed(closed map[*runtimeGate]bool) bool {
	for _, shut := range closed {
		if shut {
			return true
		}
	}
	return false
}

// usdtHits are the hits of the USDT sites by probe (provider:name).
func (t *tracer) usdtHits() map[string]int {
	if t.sitesMu != nil {
		t.sitesMu.RLock()
		defer t.sitesMu.RUnlock()
	}
	hits := map[string]int{}
	for i := range t.sites {
		if s := &t.sites[i]; s.Kind == record.KindUSDT {
			hits[s.Label] += s.hitCount()
		}
	}
	return hits
}

// loweredSemaphores reads, in proc, the semaphore of each silent USDT site
// that has one, and returns the probes (provider:name) whose semaphore is
// 0 with the PID. The kernel raised it when it installed the site's
// breakpoint in proc (ref_ctr_offset, Linux 4.20; or this trace did
// through /proc/PID/mem) and lowers it only when the breakpoint goes, so
// 0 while attached means another writer lowered it: a tracer that
// raises and lowers semaphores through /proc/PID/mem (bcc's way, and
// package semaphore's fallback) with a read-modify-write that raced the
// kernel's update wrote back a stale count. The probe then stays silent
// in that process while every tracer on it stays attached. A process
// that is gone, or a file it does not map, is not checked.
func loweredSemaphores(proc *procmaps.Process, sites []attach.Site, hits map[string]int) map[string]int {
	if proc == nil || proc.Check() != nil {
		return nil
	}
	lowered := map[string]int{}
	ids := map[string]*procmaps.FileID{} // by site path; nil: not mapped
	for _, s := range sites {
		probe, ok := strings.CutPrefix(s.Probe, "USDT ")
		if !ok || s.RefCtrOffset == 0 || hits[probe] > 0 {
			continue
		}
		id, seen := ids[s.Path]
		if !seen {
			if tg, err := proc.OpenTarget(s.Path); err == nil {
				id = &tg.ID
				tg.Close()
			}
			ids[s.Path] = id
		}
		if id == nil {
			continue
		}
		addr, err := proc.Address(*id, s.RefCtrOffset, procmaps.Write)
		if err != nil {
			continue
		}
		if v, err := semaphore.Value(proc, addr); err == nil && v == 0 {
			lowered[probe] = proc.PID
		}
	}
	return lowered
}

// silentHints returns a hint per silent probe (provider:name, no hit in
// hits) whose semaphore was found lowered (lowered: the PID), then one
// per known runtime whose other gated probes among sites are silent,
// each probe named once, in the order of sites. closed tells, for the
// runtimes it holds, whether the gate stayed closed (watchGates): a
// gated probe of a closed gate gets its hint whatever its hits, one of
// an opened gate none. hits nil means the hits were not counted per
// probe: only closed gates are hinted.
func silentHints(sites []attach.Site, hits map[string]int, lowered map[string]int, closed map[*runtimeGate]bool) []string {
	var out []string
	said := map[string]bool{}
	for _, s := range sites {
		probe, ok := strings.CutPrefix(s.Probe, "USDT ")
		pid, low := lowered[probe]
		if !ok || !low || hits[probe] > 0 || said[probe] {
			continue
		}
		said[probe] = true
		out = append(out, fmt.Sprintf("probekit trace: %s saw no hit: its semaphore in pid %d is 0 although the probe is attached, which raised it: "+
			"another tracer lowered it (one that writes semaphores through /proc/PID/mem and raced the kernel's update); trace again once it is gone", probe, pid))
	}
	var gates []*runtimeGate
	silent := map[*runtimeGate][]string{}
	for _, s := range sites {
		probe, ok := strings.CutPrefix(s.Probe, "USDT ")
		g := gateOf(s.Path, probe)
		if !ok || g == nil || said[probe] || slices.Contains(silent[g], probe) {
			continue
		}
		shut, known := closed[g]
		if known && !shut || !known && (hits == nil || hits[probe] > 0) {
			continue
		}
		if silent[g] == nil {
			gates = append(gates, g)
		}
		silent[g] = append(silent[g], probe)
	}
	for _, g := range gates {
		it := "it"
		if len(silent[g]) > 1 {
			it = "them"
		}
		names := strings.Join(silent[g], ", ")
		if !closed[g] {
			out = append(out, fmt.Sprintf("probekit trace: %s saw no hit: %s fires %s only with %s (see %s)",
				names, g.runtime, it, g.needs, runtimeGuide))
			continue
		}
		seen := "what was counted is not every call"
		if hits != nil {
			n := 0
			for _, p := range silent[g] {
				n += hits[p]
			}
			seen = fmt.Sprintf("%d hits, not every call", n)
			if n == 0 {
				seen = "no hit"
			}
		}
		out = append(out, fmt.Sprintf("probekit trace: %s: %s fires %s for every call only with %s, and the command set none while traced: %s (see %s)",
			names, g.runtime, it, g.needs, seen, runtimeGuide))
	}
	return out
}

// notFollowed returns a hint per program among the sites' files that is
// not launched (the program of -- CMD, named cmd): the command can only
// run it in a child process, which is traced with -f only. It returns
// the other sites.
func notFollowed(sites []attach.Site, launched, cmd string) ([]attach.Site, []string) {
	var rest []attach.Site
	var hints []string
	probes := map[string][]string{}
	var paths []string
	for _, s := range sites {
		if !isOtherProgram(s.Path, launched) {
			rest = append(rest, s)
			continue
		}
		probe := strings.TrimPrefix(s.Probe, "USDT ")
		if _, ok := probes[s.Path]; !ok {
			paths = append(paths, s.Path)
		}
		if !slices.Contains(probes[s.Path], probe) {
			probes[s.Path] = append(probes[s.Path], probe)
		}
	}
	for _, p := range paths {
		hints = append(hints, fmt.Sprintf("probekit trace: %s saw no hit: %s is not %s, so only a child could run it, and a child is not followed: add -f",
			strings.Join(probes[p], ", "), cmd, p))
	}
	return rest, hints
}

// isOtherProgram says whether path is an ELF program (ET_EXEC, or with an
// interpreter, PT_INTERP) other than the file launched: a program runs
// as a process's main program, so the launched process never ran it.
func isOtherProgram(path, launched string) bool {
	fi, err := os.Stat(path)
	if err != nil {
		return false
	}
	if li, err := os.Stat(launched); err != nil || os.SameFile(fi, li) {
		return false
	}
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	e, err := safeelf.NewFile(f)
	if err != nil {
		return false
	}
	if e.Type == elf.ET_EXEC {
		return true
	}
	for _, p := range e.Progs {
		if p.Type == elf.PT_INTERP {
			return true
		}
	}
	return false
}
