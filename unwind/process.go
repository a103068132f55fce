package unwind

import (
	"sort"
	"sync"

	"github.com/probekit/probekit/internal/safeelf"
	"github.com/probekit/probekit/procmaps"
)

// ProcessObjects are a process's executable mappings with their
// tables: the Objects an Unwind of that process looks addresses up in.
type ProcessObjects struct {
	cache *Cache
	proc  *procmaps.Process
	maps  []mapped
	// Errors are the objects whose CFI could not be read (they unwind
	// by frame pointers), by path.
	Errors map[string]error
}

type mapped struct {
	start, end, off uint64
	t               *Table
	segs            safeelf.Segments
	path            string
}

// Process reads p's mappings and the CFI of each executable object.
func (c *Cache) Process(p *procmaps.Process) (*ProcessObjects, error) {
	o := &ProcessObjects{cache: c, proc: p}
	return o, o.Refresh()
}

// Refresh re-reads the mappings, for objects mapped since (dlopen).
func (o *ProcessObjects) Refresh() error {
	objs, err := o.proc.Objects()
	if err != nil {
		return err
	}
	maps, _, err := o.proc.Mappings()
	if err != nil {
		return err
	}
	o.Errors = map[string]error{}
	var out []mapped
	for i := range objs {
		ob := &objs[i]
		e := o.cache.load(o.proc, ob)
		if e.err != nil {
			o.Errors[ob.Path] = e.err
		}
		for _, m := range ob.Mappings {
			if m.Perms&procmaps.Exec != 0 {
				out = append(out, mapped{start: m.Start, end: m.End, off: m.Offset, t: e.t, segs: e.segs, path: ob.Path})
			}
		}
	}
	// Executable memory that is no file: the vDSO, JIT code. It is
	// walked by frame pointers.
	for _, m := range maps {
		if m.Perms&procmaps.Exec != 0 && !m.FileBacked() {
			out = append(out, mapped{start: m.Start, end: m.End})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].start < out[j].start })
	o.maps = out
	return nil
}

// Lookup finds the table and bias of the object mapped at pc.
func (o *ProcessObjects) Lookup(pc uint64) (*Table, uint64, bool) {
	i := sort.Search(len(o.maps), func(i int) bool { return o.maps[i].end > pc })
	if i == len(o.maps) || pc < o.maps[i].start {
		return nil, 0, false
	}
	m := &o.maps[i]
	if m.t == nil {
		return nil, 0, true
	}
	// The file offset of pc, then its link-time address through the
	// segment holding that offset (gABI "Program Header").
	vaddr, ok := m.segs.Address(pc-m.start+m.off, true)
	if !ok {
		return nil, 0, true
	}
	return m.t, pc - vaddr, true
}

// MaxProcesses bounds the processes a Processes keeps; past it they are
// all dropped and read again as their samples come.
const MaxProcesses = 1024

// Processes keeps the objects of many processes for a tracer that
// unwinds their copied stacks, by PID: each process is read while it
// runs (Watch, WatchLaunched, or at its first sample), so that samples
// unwound after it exited still find its objects' tables. Safe for
// concurrent use.
type Processes struct {
	cache *Cache
	mu    sync.Mutex
	procs map[int]*ProcessObjects
}

// Processes returns a keeper of processes over c's tables.
func (c *Cache) Processes() *Processes {
	return &Processes{cache: c, procs: map[int]*ProcessObjects{}}
}

// Watch reads p's objects now (again, if it was read before). A process
// that cannot be read is skipped: its samples are unwound from what was
// read before, or read at their first.
func (ps *Processes) Watch(p *procmaps.Process) {
	o, err := ps.cache.Process(p)
	if err != nil {
		return
	}
	ps.add(p.PID, o)
}

// WatchLaunched is Watch for a command launched stopped, before its
// Finish: read now, and again at each later execve and at its exit
// stop (procmaps.Launched.Watch), when everything it mapped is there.
// The caller waits for the command with l.Wait.
func (ps *Processes) WatchLaunched(l *procmaps.Launched) {
	ps.Watch(l.Process)
	l.Watch(func(procmaps.LaunchEvent) { ps.Watch(l.Process) })
}

// Unwind walks s, a sample of process pid, with the objects read for
// it. A process not seen before is read now; one whose walk reached an
// address outside its known mappings (a library mapped since) is read
// again, while it runs, and the sample walked again.
func (ps *Processes) Unwind(pid int, s Sample) Result {
	o := ps.objects(pid)
	if o == nil {
		if p, err := procmaps.Open(pid); err == nil {
			ps.Watch(p)
		}
		if o = ps.objects(pid); o == nil {
			return s.Unwind(noObjects{})
		}
		return s.Unwind(o)
	}
	res := s.Unwind(o)
	if res.Stop == StopUnmapped && o.proc.Check() == nil {
		ps.Watch(o.proc)
		// nil when another process's Watch dropped them all meanwhile.
		if fresh := ps.objects(pid); fresh != nil && fresh != o {
			res = s.Unwind(fresh)
		}
	}
	return res
}

// objects returns the objects read for pid, nil for none.
func (ps *Processes) objects(pid int) *ProcessObjects {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.procs[pid]
}

func (ps *Processes) add(pid int, o *ProcessObjects) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if len(ps.procs) >= MaxProcesses {
		clear(ps.procs)
	}
	ps.procs[pid] = o
}

// noObjects knows no mapping: a sample of a process that could not be
// read gives its instruction pointer only.
type noObjects struct{}

func (noObjects) Lookup(uint64) (*Table, uint64, bool) { return nil, 0, false }
