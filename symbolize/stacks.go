package symbolize

import (
	"sync"

	"github.com/probekit/probekit/interp"
	"github.com/probekit/probekit/procmaps"
)

// MaxStackProcesses bounds the processes a Stacks keeps (a trace of every
// process running a library sees many); past it they are all dropped and
// opened again as their stacks come.
const MaxStackProcesses = 1024

// Stacks names the call stacks a tracer records, in many processes: it
// keeps a Process per PID, whose tables are read while the process runs
// (Watch, or the first stack of the PID), so stacks read after the
// process exited are still named. Safe for concurrent use.
type Stacks struct {
	sym   *Symbolizer
	mu    sync.Mutex
	procs map[int]*Process
}

// Stacks returns a namer of stacks over s's tables.
func (s *Symbolizer) Stacks() *Stacks {
	return &Stacks{sym: s, procs: map[int]*Process{}}
}

// Watch starts naming the stacks of p now: its files' tables are read
// while it runs (Preload), so that its stacks are named even when they
// are read after it exited (a launched command that ends at once). A
// process that cannot be read is skipped, and one that ends while it is
// read keeps what an earlier Watch read: its stacks get addresses only
// where nothing was.
func (st *Stacks) Watch(p *procmaps.Process) {
	sp, err := st.sym.ProcessOf(p)
	if err != nil {
		return
	}
	if err := sp.Preload(); err != nil {
		// It ended meanwhile: what was read of it before stays.
		st.mu.Lock()
		_, known := st.procs[p.PID]
		st.mu.Unlock()
		if known {
			return
		}
	}
	st.add(p.PID, sp)
}

// WatchLaunched is Watch for a command launched stopped (procmaps.Launch),
// before its Finish: it is read now, and again while it is stopped at
// each later execve and at its exit (procmaps.Launched.Watch), when the
// libraries its dynamic linker mapped, and those it loaded since, are
// all mapped. So a command that exits right after its hits has them all
// named. The caller then waits for the command with l.Wait.
func (st *Stacks) WatchLaunched(l *procmaps.Launched) {
	st.Watch(l.Process)
	l.Watch(func(procmaps.LaunchEvent) { st.Watch(l.Process) })
}

// Name appends the frames of stack, recorded in process pid, to dst (see
// Process.Stack for the rule on return addresses; names come from the
// tables read while the process ran, as Process.StackRecorded). A process
// never seen alive gives a frame per address with its Address only.
func (st *Stacks) Name(dst []Frame, pid int, stack []uint64) []Frame {
	p, err := st.process(pid)
	n := len(dst)
	if err == nil {
		if dst, err = p.StackRecorded(dst, stack); err == nil {
			return dst
		}
		st.mu.Lock()
		delete(st.procs, pid)
		st.mu.Unlock()
	}
	dst = dst[:n]
	for _, a := range stack {
		dst = append(dst, Frame{Address: a})
	}
	return dst
}

// Mapping is the executable mapping of a process that holds an address:
// its runtime range, file offset, the object (its path as the process
// maps it, or a pseudo name such as "[vdso]") and the object's GNU build
// ID in hex ("" without one, or when its table was not read).
type Mapping struct {
	Start, End, Offset uint64
	Object             string
	BuildID            string
}

// Mapping returns the mapping of process pid holding addr, from the maps
// read while the process ran (as Name names its stacks); false when none
// holds it or the process was never seen.
func (st *Stacks) Mapping(pid int, addr uint64) (Mapping, bool) {
	st.mu.Lock()
	p, ok := st.procs[pid]
	st.mu.Unlock()
	if !ok {
		return Mapping{}, false
	}
	return p.MappingOf(addr)
}

func (st *Stacks) process(pid int) (*Process, error) {
	st.mu.Lock()
	p, ok := st.procs[pid]
	st.mu.Unlock()
	if ok {
		return p, nil
	}
	p, err := st.sym.Process(pid)
	if err != nil {
		return nil, err
	}
	p.Preload() // the process may exit before its next stack is read
	st.add(pid, p)
	return p, nil
}

func (st *Stacks) add(pid int, p *Process) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.procs) >= MaxStackProcesses {
		clear(st.procs)
	}
	st.procs[pid] = p
}

// MergeInterp appends to dst a stack's frames with its interpreted
// ones, in the order of parts (interp.Merge's, over the stack's
// addresses and its interpreted frames): named are the native frames
// as Name gave them (one or more per address: the inlined functions,
// then the function holding them), frames the interpreted frames
// named. An interpreted frame becomes a Frame with Runtime set, and a
// PartInterpCut marker one named interp.CutName. A part out of range
// is skipped.
func MergeInterp(dst, named []Frame, parts []interp.Part, frames []interp.Frame) []Frame {
	// starts[i] is where address i's frames begin in named.
	var buf [128]int
	starts := buf[:0]
	for i := range named {
		if i == 0 || !named[i-1].Inlined {
			starts = append(starts, i)
		}
	}
	starts = append(starts, len(named))
	runtime := ""
	for _, p := range parts {
		switch p.Kind {
		case interp.PartNative:
			if p.Index >= 0 && p.Index+1 < len(starts) {
				dst = append(dst, named[starts[p.Index]:starts[p.Index+1]]...)
			}
		case interp.PartInterp:
			if p.Index >= 0 && p.Index < len(frames) {
				f := frames[p.Index]
				runtime = f.Runtime
				dst = append(dst, Frame{Function: f.DisplayName(), File: f.File, Line: f.Line, Runtime: or(f.Runtime, "interpreter")})
			}
		case interp.PartInterpCut:
			dst = append(dst, Frame{Function: interp.CutName(runtime), Runtime: or(runtime, "interpreter")})
		}
	}
	return dst
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
