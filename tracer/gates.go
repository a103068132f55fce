package tracer

import (
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/probekit/probekit/attach"
	"github.com/probekit/probekit/probe"
	"github.com/probekit/probekit/procmaps"
	"github.com/probekit/probekit/uprobe"
)

// gateSetters are, by runtime (runtimeGate.runtime), the functions that
// open its gate, found in the file that holds the gated probes. CPython
// 3.11's sys.setprofile and sys.settrace, threading's per-thread
// setprofile, cProfile and the C API's PyEval_SetProfile and
// PyEval_SetTrace all end in _PyEval_SetProfile or _PyEval_SetTrace
// (Python/ceval.c, Python/sysmodule.c); both are exported.
var gateSetters = map[string][]string{
	"CPython": {"_PyEval_SetProfile", "_PyEval_SetTrace"},
}

// gateWatch counts the calls of gate setters in a launched command: a
// gated probe whose gate no call opened fired only where the runtime
// fires it regardless (CPython's function__entry: the frames entered
// from C, such as <frozen importlib._bootstrap>'s at start-up), and the
// hint says so even though it saw hits.
type gateWatch struct {
	coll  *ebpf.Collection
	links []*attach.Link
	// watched are the runtimes whose setters are attached.
	watched map[*runtimeGate]bool
}

// gateCountName names the program and its one-counter map.
const gateCountName = "gate_calls"

// gateCountSpec is a program that adds 1 to the map's counter, for the
// entry of every gate setter.
func gateCountSpec() *ebpf.CollectionSpec {
	return &ebpf.CollectionSpec{
		Maps: map[string]*ebpf.MapSpec{
			gateCountName: {Name: gateCountName, Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1},
		},
		Programs: map[string]*ebpf.ProgramSpec{
			gateCountName: {
				Name: gateCountName, Type: ebpf.Kprobe, SectionName: "uprobe", License: "GPL",
				Instructions: asm.Instructions{
					asm.StoreImm(asm.R10, -4, 0, asm.Word),
					asm.LoadMapPtr(asm.R1, 0).WithReference(gateCountName),
					asm.Mov.Reg(asm.R2, asm.R10),
					asm.Add.Imm(asm.R2, -4),
					asm.FnMapLookupElem.Call(),
					asm.JEq.Imm(asm.R0, 0, "out"),
					asm.Mov.Imm(asm.R1, 1),
					asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
					asm.Mov.Imm(asm.R0, 0).WithSymbol("out"),
					asm.Return(),
				},
			},
		},
	}
}

// watchGates attaches the gate setters of the runtimes whose gated
// probes links hold (links[i] is probes[i]'s), in proc, a launched
// command stopped before it runs, so that every call is seen. A runtime
// whose setters cannot be attached is left out: its hint is the one for
// a silent probe. It returns nil when nothing is watched.
func watchGates(probes []probe.Spec, links []*attach.Link, proc *procmaps.Process) *gateWatch {
	var w *gateWatch
	tried := map[string]bool{} // by target and runtime
	for i, l := range links {
		for _, s := range l.Sites() {
			g := gateOf(s.Path, usdtProbe(s))
			if g == nil || gateSetters[g.runtime] == nil || tried[probes[i].Target+"\x00"+g.runtime] {
				continue
			}
			tried[probes[i].Target+"\x00"+g.runtime] = true
			if w == nil {
				spec := gateCountSpec()
				if err := uprobe.Prepare(spec, gateCountName); err != nil {
					return nil
				}
				coll, err := ebpf.NewCollection(spec)
				if err != nil {
					return nil
				}
				w = &gateWatch{coll: coll, watched: map[*runtimeGate]bool{}}
			}
			if err := w.attach(probes[i].Target, g, proc); err == nil {
				w.watched[g] = true
			}
		}
	}
	if w != nil && len(w.watched) == 0 {
		closeLinks(w.links)
		w.close()
		return nil
	}
	return w
}

// attach puts the counter on g's setters in target as proc sees it, as
// one attachment.
func (w *gateWatch) attach(target string, g *runtimeGate, proc *procmaps.Process) error {
	b, err := uprobe.OpenProcess(proc, target)
	if err != nil {
		return err
	}
	defer b.Close()
	var fns []uprobe.Function
	for _, name := range gateSetters[g.runtime] {
		fn, err := b.Function(name)
		if err != nil {
			return err
		}
		fns = append(fns, fn)
	}
	l, err := b.Entries(fns, w.coll.Programs[gateCountName], &uprobe.Options{PID: proc.PID})
	if err != nil {
		return err
	}
	w.links = append(w.links, l)
	return nil
}

// opened reports whether a gate setter was called; an error when the
// counter cannot be read.
func (w *gateWatch) opened() (bool, error) {
	var n uint64
	if err := w.coll.Maps[gateCountName].Lookup(uint32(0), &n); err != nil {
		return false, err
	}
	return n > 0, nil
}

// closed returns the runtimes watched whose gate no call opened, nil
// when that cannot be told.
func (w *gateWatch) closed() map[*runtimeGate]bool {
	if w == nil {
		return nil
	}
	opened, err := w.opened()
	if err != nil {
		return nil
	}
	out := map[*runtimeGate]bool{}
	for g := range w.watched {
		out[g] = !opened
	}
	return out
}

// attached returns the setters' links, which the trace closes with its
// own (closeLinks: one wait for the kernel's grace periods).
func (w *gateWatch) attached() []*attach.Link {
	if w == nil {
		return nil
	}
	return w.links
}

// close frees the program; its links hold it until they are closed.
func (w *gateWatch) close() {
	if w != nil {
		w.coll.Close()
	}
}

// usdtProbe is a USDT site's provider:name, "" for another site.
func usdtProbe(s attach.Site) string {
	p, _ := strings.CutPrefix(s.Probe, "USDT ")
	if p == s.Probe {
		return ""
	}
	return p
}
