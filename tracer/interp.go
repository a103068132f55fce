package tracer

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/cilium/ebpf"

	"github.com/probekit/probekit/internal/privilege"
	"github.com/probekit/probekit/interp"
	"github.com/probekit/probekit/interp/python"
	"github.com/probekit/probekit/procmaps"
	"github.com/probekit/probekit/record"
	"github.com/probekit/probekit/symbolize"
)

// interpTables creates the map of the interpreter walk (python.bpf.h)
// that the trace program's CFI-walked stacks read, sizes spec's to it
// and adds it to opts' replacements. Without it (a kernel without BTF)
// the trace goes on with native frames only: it warns on stderr and
// returns nil.
func interpTables(spec *ebpf.CollectionSpec, opts *ebpf.CollectionOptions, stderr io.Writer) *python.Tables {
	if v, err := privilege.RunningKernel(); err != nil || v.Less(interpMinKernel) {
		return nil // docs/stacks.md, docs/kernels.md
	}
	t, err := python.NewTables(nil)
	if err == nil {
		if err = t.Prepare(spec); err != nil {
			t.Close()
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "probekit trace: warning: --stack: Python frames are not read: %v\n", err)
		return nil
	}
	if opts.MapReplacements == nil {
		opts.MapReplacements = map[string]*ebpf.Map{}
	}
	for name, m := range t.Replacements() {
		opts.MapReplacements[name] = m
	}
	return t
}

// closeInterpTables closes t, when there is one.
func closeInterpTables(t *python.Tables) {
	if t != nil {
		t.Close()
	}
}

// interpStacks finds the interpreter of each process whose stacks the
// CFI walk reads (python.Find), gives the walk its runtime
// (python.Tables.Add) and names its frames. Names are kept per process
// as they are read, so that a counted stack read after its process
// exited is still named. Safe for concurrent use.
type interpStacks struct {
	tables *python.Tables
	warnf  func(string, ...any)
	mu     sync.Mutex
	procs  map[int]*interpProc
	// objs are a --count trace's maps: its counted stacks' frames are
	// named as they come (nameCounted); named are the stacks (ids)
	// whose frames were.
	objs  *record.Objects
	named map[int64]bool
}

// maxNamedStacks bounds the counted stacks remembered as named: more
// than the counted stacks' map holds (record.MaxStacks).
const maxNamedStacks = 4 * record.MaxStacks

// countedNaming is how often a --count trace names the interpreter
// frames of the stacks counted since: a Python program that ends frees
// its code objects (Py_Finalize) before its exit, so the names are
// read while it runs.
const countedNaming = 200 * time.Millisecond

// run names the counted stacks' frames every countedNaming until done
// is closed.
func (s *interpStacks) run(done <-chan struct{}) {
	if s == nil || s.objs == nil {
		return
	}
	tick := time.NewTicker(countedNaming)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
			s.nameCounted()
		}
	}
}

// watchLaunched finds a launched command's interpreter again at its
// execs and at its entry point (a libpython it links is mapped then),
// and names its counted stacks at its exit, its memory still there.
func (s *interpStacks) watchLaunched(l *procmaps.Launched) {
	if s == nil {
		return
	}
	s.add(l.Process, true)
	l.Watch(func(ev procmaps.LaunchEvent) {
		switch ev {
		case procmaps.LaunchExec, procmaps.LaunchEntry:
			s.add(l.Process, true)
		case procmaps.LaunchExit:
			s.nameCounted()
			if s.objs == nil && s.known(l.Process.PID) {
				// Printed hits: the records in the ring are read
				// within liveInterval; the command's memory stays
				// while it is held here, so their frames are named.
				time.Sleep(exitHold)
			}
		}
	})
}

type interpProc struct {
	proc *procmaps.Process
	in   *python.Interpreter
	eval [][2]uint64
	// names are the frames named while the process ran.
	names map[interp.Raw]interp.Frame
}

// maxInterpNames bounds the names kept per process; past it they are
// dropped and read again.
const maxInterpNames = 16384

func newInterpStacks(t *python.Tables, warnf func(string, ...any)) *interpStacks {
	return &interpStacks{tables: t, warnf: warnf, procs: map[int]*interpProc{}, named: map[int64]bool{}}
}

// add finds p's interpreter and adds it to the walk's map, unless p is
// known already as this process (again when again is set: an exec, a
// launched command's entry with its libraries mapped). A process that
// runs no known interpreter costs nothing more.
func (s *interpStacks) add(p *procmaps.Process, again bool) {
	if s == nil {
		return
	}
	s.mu.Lock()
	old := s.procs[p.PID]
	s.mu.Unlock()
	if old != nil && !again && old.proc.StartTime == p.StartTime {
		return
	}
	in, err := python.Find(p)
	if err != nil {
		// A process that ended is said so by the CFI tables' warning.
		if !errors.Is(err, python.ErrNotPython) && !errors.Is(err, procmaps.ErrProcessGone) && !errors.Is(err, procmaps.ErrProcessChanged) {
			s.warnf("%v: its Python frames are not read: %v", p, err)
		}
		return
	}
	if err := s.tables.Add(p.PID, in); err != nil {
		in.Close()
		s.warnf("%v: its Python frames are not read: %v", p, err)
		return
	}
	s.mu.Lock()
	if old = s.procs[p.PID]; old != nil {
		old.in.Close()
	}
	s.procs[p.PID] = &interpProc{proc: p, in: in, eval: in.EvalRanges(), names: map[interp.Raw]interp.Frame{}}
	s.mu.Unlock()
}

// refresh forgets the processes that exited (or whose PID is another
// process's now).
func (s *interpStacks) refresh() {
	if s == nil {
		return
	}
	s.mu.Lock()
	var gone []int
	for pid, ip := range s.procs {
		if ip.proc.Check() != nil {
			gone = append(gone, pid)
		}
	}
	s.mu.Unlock()
	for _, pid := range gone {
		s.remove(pid)
	}
}

// remove takes pid out of the walk's map. Its names are kept until
// close, for its stacks still to be read.
func (s *interpStacks) remove(pid int) {
	if err := s.tables.Remove(pid); err != nil {
		s.warnf("%v", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if ip := s.procs[pid]; ip != nil {
		ip.in.Close()
		if len(s.procs) > maxGoneInterps {
			delete(s.procs, pid)
		}
	}
}

// maxGoneInterps bounds the processes kept for their names after they
// exited (a host-wide trace sees many short ones).
const maxGoneInterps = 256

// close releases the interpreters' handles on their processes.
func (s *interpStacks) close() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ip := range s.procs {
		ip.in.Close()
	}
}

// exitHold is how long a launched Python command is held at its exit
// for the hits still in the ring to be read and named.
const exitHold = 2 * liveInterval

// known reports whether pid's interpreter was found.
func (s *interpStacks) known(pid int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.procs[pid] != nil
}

// evalRanges are the eval loop's ranges in process pid (nil: none).
func (s *interpStacks) evalRanges(pid int) [][2]uint64 {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if ip := s.procs[pid]; ip != nil {
		return ip.eval
	}
	return nil
}

// name names raws of process pid: by its interpreter while it runs,
// else from the names read while it ran.
func (s *interpStacks) name(dst []interp.Frame, pid int, raws []interp.Raw) []interp.Frame {
	s.mu.Lock()
	ip := s.procs[pid]
	s.mu.Unlock()
	for _, r := range raws {
		if ip == nil {
			dst = append(dst, interp.Frame{Runtime: "python", Unreadable: "the process's interpreter was not read"})
			continue
		}
		f := ip.in.Name(r)
		s.mu.Lock()
		if f.Unreadable != "" && r.Flags&interp.FlagBad == 0 {
			if kept, ok := ip.names[r]; ok {
				f = kept
			}
		} else if f.Unreadable == "" {
			if len(ip.names) >= maxInterpNames {
				clear(ip.names)
			}
			ip.names[r] = f
		}
		s.mu.Unlock()
		dst = append(dst, f)
	}
	return dst
}

// nameCounted names the interpreter frames of the stacks counted so far
// that were not named yet, while their processes run: a counted stack
// is printed when the trace ends, when its process may be gone.
func (s *interpStacks) nameCounted() {
	if s == nil || s.objs == nil {
		return
	}
	entries, err := s.objs.Keyed()
	if err != nil {
		return
	}
	var buf []interp.Frame
	for _, e := range entries {
		id, ok := s.objs.StackID(e.Key)
		s.mu.Lock()
		done := s.named[id]
		s.mu.Unlock()
		if !ok || done || id < 0 {
			continue
		}
		w, err := s.objs.Walked(e.Key)
		if err != nil {
			continue
		}
		buf = s.name(buf[:0], int(e.Key.StackPID), w.Interp)
		s.mu.Lock()
		if len(s.named) >= maxNamedStacks {
			clear(s.named) // named again: their names are kept per process
		}
		s.named[id] = true
		s.mu.Unlock()
	}
}

// merged is a stack with its interpreter frames among the native ones
// (interp.Merge, symbolize.MergeInterp): native are the addresses,
// named their frames as symbolize named them. It returns the parts and
// the interpreted frames named too, for a profile, and how many
// interpreted frames were left after the native ones.
func (s *interpStacks) merged(pid int, native []uint64, named []symbolize.Frame, raws []interp.Raw, stop uint8) (frames []symbolize.Frame, parts []interp.Part, py []interp.Frame, leftover int) {
	if s == nil || len(raws) == 0 {
		return named, nil, nil, 0
	}
	parts, leftover = interp.Merge(nil, native, raws, s.evalRanges(pid), python.Stop(stop) == python.StopDepth)
	py = s.name(nil, pid, raws)
	return symbolize.MergeInterp(make([]symbolize.Frame, 0, len(named)+len(raws)+1), named, parts, py), parts, py, leftover
}

// leftoverCut is the truncation reason of a stack whose interpreted
// frames outlasted its native eval-loop frames.
func leftoverCut(n int) string {
	return fmt.Sprintf("%d Python frames past the native stack's eval-loop frames", n)
}

// interpMinKernel is the oldest kernel whose verifier was seen to take
// the trace program with the Python walk (Linux 6.18, this project's
// host). Debian's 6.1 refuses it at its 1,000,000 processed instructions
// ("BPF program is too large"); 5.10 and 6.12 were not tried. On older
// kernels --stack walks native frames only.
var interpMinKernel = privilege.Version{6, 18}
