package bpfunwind

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/probekit/probekit/procmaps"
	"github.com/probekit/probekit/unwind"
)

// Sizes of unwind.bpf.h's maps.
const (
	// MaxMappings is how many executable mappings of one process the
	// walk knows (PROBEKIT_CFI_MAX_MAPPINGS): a process with more gets
	// its first MaxMappings (by address); the others are walked by
	// frame pointers.
	MaxMappings = 256
	// DefaultRows is Options.Rows' default: 1Mi rows of RowSize bytes
	// (8 MiB, preallocated), about 40 times Debian 12's libc.
	DefaultRows = 1 << 20
	// DefaultObjects is Options.Objects' default.
	DefaultObjects = 4096
	// DefaultProcesses is Options.Processes' default (each process's
	// value is 8 KiB, allocated as it is added).
	DefaultProcesses = 1024
	// maxRows bounds Options.Rows: the BPF search makes
	// PROBEKIT_CFI_ROW_STEPS (25) halvings, enough for 2^24 rows of
	// one object.
	maxRows = 1 << 24
	// DefaultReuseAfter is Options.ReuseAfter's default. A freed
	// object's id and rows are given to another object only this long
	// after the last process that mapped it was removed, so that a walk
	// that read its id before (from a process value it had looked up)
	// never reads another object's rows under it. A walk is one run of
	// a BPF program, within one RCU read-side critical section
	// (rcu_read_lock; rcu_read_lock_trace as well for the sleepable
	// programs of record's faulting strings): its 127 steps take tens
	// of microseconds of CPU, and the walk itself never sleeps
	// (bpf_probe_read_user does not fault pages in). Only preemption
	// can stretch it. A reader that holds up a grace period for 21 s
	// is reported by the kernel as an RCU stall
	// (CONFIG_RCU_CPU_STALL_TIMEOUT's default): 30 s is beyond that.
	// This is a bound in practice, not a proof: a task preempted
	// inside a walk for longer (tasks-trace RCU warns only after 10
	// minutes, CONFIG_RCU_TASK_STALL_TIMEOUT) could still read rows
	// given to another object, and unwind that one stack wrongly.
	DefaultReuseAfter = 30 * time.Second
)

// Map names in unwind.bpf.h.
const (
	ProcsMap   = "probekit_cfi_procs"
	ObjectsMap = "probekit_cfi_objects"
	RowsMap    = "probekit_cfi_rows"
)

// ErrFull: the rows or objects map has no room for an object's table.
// The object is walked by frame pointers; it is tried again once rows
// or ids are freed.
var ErrFull = errors.New("unwind tables full")

// Options size the maps; zero fields take the defaults.
type Options struct {
	// Rows is the rows map's size (DefaultRows; RowSize bytes each,
	// preallocated). When 0, the environment's PROBEKIT_CFI_ROWS, a
	// number of rows, is used if set: the way to raise the ceiling of
	// a command line (probekit trace --stack).
	Rows      int
	Objects   int
	Processes int
	// Cache holds the objects' CFI; nil makes one.
	Cache *unwind.Cache
	// ReuseAfter is how long a freed object's id and rows wait before
	// another object takes them (DefaultReuseAfter when 0; see there).
	// An object loaded again meanwhile gets them back.
	ReuseAfter time.Duration
}

// RowsEnv is the environment variable that sets Options.Rows' default.
const RowsEnv = "PROBEKIT_CFI_ROWS"

// Tables owns unwind.bpf.h's maps of processes, objects and rows, and
// fills them from the CFI of the objects the processes map. A program
// including unwind.bpf.h uses them once Prepare adjusted its spec and
// the collection took Replacements. Safe for concurrent use.
type Tables struct {
	mu      sync.Mutex
	cache   *unwind.Cache
	procs   *ebpf.Map
	objects *ebpf.Map
	rows    *ebpf.Map
	opts    Options

	loaded map[*unwind.Table]*object
	// quarantine are the objects freed less than ReuseAfter ago, in
	// the order freed: their ids and rows are not reused yet.
	quarantine []freed
	freeIDs    []uint32
	nextID     uint32 // ids from 1: 0 is "no rows"
	free       []extent
	next       uint32 // first row never used
	pids       map[int][]*object
	// added are the processes as Add was given them, for Refresh.
	added map[int]*procmaps.Process
	// spans are when each PID was last in the process map
	// (CLOCK_MONOTONIC, as bpf_ktime_get_ns): removed 0 while it is.
	spans map[int]span
	// errs are the tables refused, while a process maps them (refs
	// counts the processes: the entry, and the table it holds, go with
	// the last); failed keeps each refusal's error for Errors, by
	// path, after that.
	errs   map[*unwind.Table]*loadError
	failed map[string]error
	// refusedBy are the refused tables of each process's last Add.
	refusedBy map[int][]*unwind.Table
	// gen counts the times ids or rows came back from the quarantine:
	// an object refused as ErrFull is tried again when it changed.
	gen uint64
	// refused counts the objects refused, by reason.
	refused map[string]int
}

type loadError struct {
	err  error
	full bool
	gen  uint64 // t.gen when it was refused
	refs int
}

// maxFailed bounds the refusals Errors keeps (by path) for processes
// gone: one per object of a host that filled the tables.
const maxFailed = 1024

type freed struct {
	o  *object
	at uint64 // monotonic(), when freed
}

type span struct{ added, removed uint64 }

// spanKept is how long a removed process's stay is remembered (Refresh
// forgets it then): longer than its last records take to be read.
const spanKept = 30 * time.Second

// monotonic is CLOCK_MONOTONIC in nanoseconds, bpf_ktime_get_ns's clock.
func monotonic() uint64 {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) != nil {
		return 0
	}
	return uint64(ts.Nano())
}

type object struct {
	id   uint32
	ext  extent
	refs int
	tab  *unwind.Table
}

type extent struct{ first, count uint32 }

// procValue is struct probekit_cfi_process's size: n, pad, the mappings
// of 32 bytes.
const procValue = 8 + MaxMappings*32

// New creates the maps.
func New(opts *Options) (*Tables, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Objects == 0 {
		o.Objects = DefaultObjects
	}
	if o.Processes == 0 {
		o.Processes = DefaultProcesses
	}
	if o.ReuseAfter <= 0 {
		o.ReuseAfter = DefaultReuseAfter
	}
	if o.Rows == 0 {
		o.Rows = DefaultRows
		if env := os.Getenv(RowsEnv); env != "" {
			n, err := strconv.Atoi(env)
			if err != nil || n <= 0 {
				return nil, fmt.Errorf("bpfunwind: $%s=%q: want a number of rows (%d by default, %d bytes each)", RowsEnv, env, DefaultRows, RowSize)
			}
			o.Rows = n
		}
	}
	if o.Rows < 0 || o.Rows > maxRows || o.Objects < 0 || o.Processes < 0 {
		return nil, fmt.Errorf("bpfunwind: %d rows (at most %d), %d objects, %d processes", o.Rows, maxRows, o.Objects, o.Processes)
	}
	if o.Cache == nil {
		o.Cache = unwind.NewCache()
	}
	t := &Tables{cache: o.Cache, opts: o, loaded: map[*unwind.Table]*object{},
		nextID: 1, pids: map[int][]*object{}, added: map[int]*procmaps.Process{}, spans: map[int]span{},
		errs: map[*unwind.Table]*loadError{}, failed: map[string]error{}, refusedBy: map[int][]*unwind.Table{}, refused: map[string]int{}}
	var err error
	for _, m := range []struct {
		dst  **ebpf.Map
		spec ebpf.MapSpec
	}{
		{&t.procs, ebpf.MapSpec{Name: "pk_cfi_procs", Type: ebpf.Hash, KeySize: 4, ValueSize: procValue, MaxEntries: uint32(o.Processes), Flags: noPrealloc}},
		{&t.objects, ebpf.MapSpec{Name: "pk_cfi_objects", Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: uint32(o.Objects + 1)}},
		{&t.rows, ebpf.MapSpec{Name: "pk_cfi_rows", Type: ebpf.Array, KeySize: 4, ValueSize: RowSize, MaxEntries: uint32(o.Rows)}},
	} {
		if *m.dst, err = ebpf.NewMap(&m.spec); err != nil {
			t.Close()
			return nil, fmt.Errorf("bpfunwind: map %s: %w", m.spec.Name, err)
		}
	}
	return t, nil
}

// noPrealloc is BPF_F_NO_PREALLOC: a process's 8 KiB value is allocated
// when it is added.
const noPrealloc = 1

// Close releases the maps (a collection that took them holds its own
// references).
func (t *Tables) Close() error {
	var errs []error
	for _, m := range []*ebpf.Map{t.procs, t.objects, t.rows} {
		if m != nil {
			errs = append(errs, m.Close())
		}
	}
	return errors.Join(errs...)
}

// Prepare sets the sizes of spec's unwind.bpf.h maps to t's, which
// ebpf.CollectionOptions.MapReplacements requires, and checks their key
// and value sizes (a header of another version).
func (t *Tables) Prepare(spec *ebpf.CollectionSpec) error {
	for name, m := range t.Replacements() {
		ms := spec.Maps[name]
		if ms == nil {
			return fmt.Errorf("bpfunwind: the collection has no map %s (unwind.bpf.h not included)", name)
		}
		if ms.KeySize != m.KeySize() || ms.ValueSize != m.ValueSize() {
			return fmt.Errorf("bpfunwind: map %s of key %d and value %d bytes, want %d and %d (another unwind.bpf.h)",
				name, ms.KeySize, ms.ValueSize, m.KeySize(), m.ValueSize())
		}
		ms.MaxEntries = m.MaxEntries()
		ms.Flags = m.Flags()
	}
	return nil
}

// Replacements are the maps for ebpf.CollectionOptions.MapReplacements,
// by their names in unwind.bpf.h.
func (t *Tables) Replacements() map[string]*ebpf.Map {
	return map[string]*ebpf.Map{ProcsMap: t.procs, ObjectsMap: t.objects, RowsMap: t.rows}
}

// Add reads p's executable mappings and the CFI of the objects there,
// loads the tables of objects not loaded yet, and sets p's mappings in
// the process map (again, for objects mapped since: call it after a
// dlopen, or at a launched command's stops). An object whose table
// cannot be built or does not fit is walked by frame pointers (Errors
// says why). The error is p's (unreadable, gone) or the map's.
func (t *Tables) Add(p *procmaps.Process) error {
	po, err := t.cache.Process(p)
	if err != nil {
		return fmt.Errorf("bpfunwind: %v: %w", p, err)
	}
	maps := po.Mappings()
	if len(maps) > MaxMappings {
		maps = maps[:MaxMappings]
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	val := make([]byte, procValue)
	binary.NativeEndian.PutUint32(val, uint32(len(maps)))
	// Objects freed a moment ago first take their ids and rows back,
	// before a new object's load frees the quarantine's expired.
	for _, m := range maps {
		if m.Table != nil && t.loaded[m.Table] == nil {
			t.revive(m.Table)
		}
	}
	var refs []*object
	var refused []*unwind.Table
	for i, m := range maps {
		var id uint32
		if m.Table != nil {
			if o := t.load(m.Table, m.Path); o != nil {
				o.refs++
				refs = append(refs, o)
				id = o.id
			} else if e := t.errs[m.Table]; e != nil {
				e.refs++
				refused = append(refused, m.Table)
			}
		}
		e := val[8+32*i:]
		binary.NativeEndian.PutUint64(e, m.Start)
		binary.NativeEndian.PutUint64(e[8:], m.End)
		binary.NativeEndian.PutUint64(e[16:], m.Bias)
		binary.NativeEndian.PutUint32(e[24:], id)
	}
	err = t.procs.Put(uint32(p.PID), val)
	t.release(t.pids[p.PID])
	t.pids[p.PID] = refs
	t.releaseRefused(t.refusedBy[p.PID])
	t.refusedBy[p.PID] = refused
	t.added[p.PID] = p
	if sp, ok := t.spans[p.PID]; !ok || sp.removed != 0 {
		t.spans[p.PID] = span{added: monotonic()}
	}
	if err != nil {
		return fmt.Errorf("bpfunwind: process %d: %w", p.PID, err)
	}
	return nil
}

// Watch adds a launched command now, again at its program's entry
// point (its shared libraries mapped) and at its later execs
// (procmaps.Launched.Watch); call it before l.Finish. Objects it maps
// later (dlopen) are known only after another Add: see the package
// documentation.
func (t *Tables) Watch(l *procmaps.Launched) error {
	err := t.Add(l.Process)
	l.Watch(func(ev procmaps.LaunchEvent) {
		if ev == procmaps.LaunchExec || ev == procmaps.LaunchEntry {
			t.Add(l.Process)
		}
	})
	return err
}

// KnownAt reports whether process pid was in the walk's process map at
// time ns (CLOCK_MONOTONIC, a record's bpf_ktime_get_ns): a process a
// trace reaches before it is added is walked by frame records alone.
// Only the PID's last stay is remembered.
func (t *Tables) KnownAt(pid int, ns uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	sp, ok := t.spans[pid]
	return ok && sp.added <= ns && (sp.removed == 0 || ns < sp.removed)
}

// Known reports whether process pid is in the walk's process map now.
func (t *Tables) Known(pid int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.added[pid]
	return ok
}

// Remove forgets process pid; the tables of objects no other process
// maps are freed.
func (t *Tables) Remove(pid int) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	err := t.procs.Delete(uint32(pid))
	t.release(t.pids[pid])
	delete(t.pids, pid)
	t.releaseRefused(t.refusedBy[pid])
	delete(t.refusedBy, pid)
	delete(t.added, pid)
	if sp, ok := t.spans[pid]; ok && sp.removed == 0 {
		sp.removed = monotonic()
		t.spans[pid] = sp
	}
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("bpfunwind: process %d: %w", pid, err)
	}
	return nil
}

// Refresh adds every process again, for the objects each has mapped
// since its last Add (dlopen), and removes those that have exited (or
// whose PID another process has now), which frees their tables. It
// returns the errors of processes that could not be read otherwise.
func (t *Tables) Refresh() error {
	t.mu.Lock()
	procs := make([]*procmaps.Process, 0, len(t.added))
	for _, p := range t.added {
		procs = append(procs, p)
	}
	t.mu.Unlock()
	t.mu.Lock()
	now := monotonic()
	t.expire(now)
	for pid, sp := range t.spans {
		if sp.removed != 0 && now-sp.removed > uint64(spanKept) {
			delete(t.spans, pid)
		}
	}
	t.mu.Unlock()
	var errs []error
	for _, p := range procs {
		err := p.Check()
		if err == nil {
			if err = t.Add(p); err == nil {
				continue
			}
		}
		if cerr := p.Check(); errors.Is(cerr, procmaps.ErrProcessGone) || errors.Is(cerr, procmaps.ErrProcessChanged) {
			err = t.removeIf(p)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// removeIf removes p unless its PID was added again meanwhile as
// another process.
func (t *Tables) removeIf(p *procmaps.Process) error {
	t.mu.Lock()
	same := t.added[p.PID] == p
	t.mu.Unlock()
	if !same {
		return nil
	}
	return t.Remove(p.PID)
}

// Errors are the objects refused (an FDE past 4 GiB, rules that give
// no rows, or no room: ErrFull), one per path, naming it, also after
// the processes that mapped them are gone (at most 1,024 paths): their
// frames were walked by frame pointers. A path loaded since is not
// among them.
func (t *Tables) Errors() []error {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]error, 0, len(t.failed))
	for _, err := range t.failed {
		out = append(out, err)
	}
	return out
}

// Stats is what the maps hold.
type Stats struct {
	Processes, Objects int
	// Rows are the rows in use; RowBytes their memory (RowSize each);
	// RowCapacity the rows map's size.
	Rows, RowBytes, RowCapacity int
	// Quarantined are the objects, and their rows, freed less than
	// Options.ReuseAfter ago: neither in use nor free yet.
	Quarantined, QuarantinedRows int
	// Refused counts the times an object was refused, by reason:
	// "rows full", "objects full", "address range", "no rows", "build"
	// (another error building or writing its rows).
	Refused map[string]int
}

// Stats returns what t holds now.
func (t *Tables) Stats() Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := Stats{Processes: len(t.pids), Objects: len(t.loaded), RowCapacity: t.opts.Rows,
		Quarantined: len(t.quarantine), Refused: map[string]int{}}
	for _, o := range t.loaded {
		s.Rows += int(o.ext.count)
	}
	for _, q := range t.quarantine {
		s.QuarantinedRows += int(q.o.ext.count)
	}
	for k, v := range t.refused {
		s.Refused[k] = v
	}
	s.RowBytes = s.Rows * RowSize
	return s
}

// load returns the loaded object of table tab (the object at path),
// loading it (nil when it cannot be built or does not fit). Called with
// mu held.
func (t *Tables) load(tab *unwind.Table, path string) *object {
	if o := t.loaded[tab]; o != nil {
		return o
	}
	if o := t.revive(tab); o != nil {
		return o
	}
	now := monotonic()
	t.expire(now)
	if e, ok := t.errs[tab]; ok && (!e.full || e.gen == t.gen) {
		return nil // refused before, and nothing was freed since
	}
	o, reason, err := t.loadNew(tab)
	if err != nil {
		e := t.errs[tab]
		if e == nil {
			e = &loadError{}
			t.errs[tab] = e
		}
		e.err, e.full, e.gen = fmt.Errorf("%s: %w", path, err), errors.Is(err, ErrFull), t.gen
		if _, ok := t.failed[path]; ok || len(t.failed) < maxFailed {
			t.failed[path] = e.err
		}
		t.refused[reason]++
		return nil
	}
	delete(t.errs, tab)
	delete(t.failed, path)
	o.tab = tab
	t.loaded[tab] = o
	return o
}

// releaseRefused drops one process's hold on each refused table: the
// entry of a table no process maps any more goes (its error stays in
// failed). Called with mu held.
func (t *Tables) releaseRefused(tabs []*unwind.Table) {
	for _, tab := range tabs {
		if e := t.errs[tab]; e != nil {
			if e.refs--; e.refs <= 0 {
				delete(t.errs, tab)
			}
		}
	}
}

// revive gives tab its object back when it is in the quarantine: its
// rows are still in the map, under its id. Called with mu held.
func (t *Tables) revive(tab *unwind.Table) *object {
	for i, q := range t.quarantine {
		if q.o.tab != tab {
			continue
		}
		if t.objects.Put(q.o.id, objectValue(q.o.ext)) != nil {
			return nil
		}
		t.quarantine = append(t.quarantine[:i], t.quarantine[i+1:]...)
		t.loaded[tab] = q.o
		return q.o
	}
	return nil
}

// expire frees the ids and rows of the objects in quarantine for
// ReuseAfter by now. Called with mu held.
func (t *Tables) expire(now uint64) {
	n := 0
	for _, q := range t.quarantine {
		if now < q.at+uint64(t.opts.ReuseAfter) {
			break // the rest were freed later
		}
		t.freeIDs = append(t.freeIDs, q.o.id)
		t.freeExtent(q.o.ext)
		n++
	}
	if n > 0 {
		t.quarantine = append(t.quarantine[:0], t.quarantine[n:]...)
		t.gen++
	}
}

func objectValue(ext extent) []byte {
	ov := binary.NativeEndian.AppendUint32(nil, ext.first)
	return binary.NativeEndian.AppendUint32(ov, ext.count)
}

// loadNew builds tab's rows and writes them under a free id; on error,
// the reason is a Stats.Refused key.
func (t *Tables) loadNew(tab *unwind.Table) (*object, string, error) {
	rows, err := Build(tab)
	if err != nil {
		if errors.Is(err, ErrAddressRange) {
			return nil, "address range", err
		}
		return nil, "build", err
	}
	if len(rows) == 0 {
		return nil, "no rows", unwind.ErrNoCFI
	}
	var id uint32
	if n := len(t.freeIDs); n > 0 {
		id, t.freeIDs = t.freeIDs[n-1], t.freeIDs[:n-1]
	} else if t.nextID <= uint32(t.opts.Objects) {
		id = t.nextID
		t.nextID++
	} else {
		return nil, "objects full", fmt.Errorf("%w: %d objects, %d of them freed less than %v ago (raise Options.Objects)", ErrFull, t.opts.Objects, len(t.quarantine), t.opts.ReuseAfter)
	}
	ext, ok := t.alloc(uint32(len(rows)))
	if !ok {
		t.freeIDs = append(t.freeIDs, id)
		q := 0
		for _, f := range t.quarantine {
			q += int(f.o.ext.count)
		}
		return nil, "rows full", fmt.Errorf("%w: %d rows needed, %d of %d in use, %d freed less than %v ago (raise $%s or Options.Rows)",
			ErrFull, len(rows), t.inUse(), t.opts.Rows, q, t.opts.ReuseAfter, RowsEnv)
	}
	if err := t.putRows(ext.first, rows); err != nil {
		t.freeExtent(ext)
		t.freeIDs = append(t.freeIDs, id)
		return nil, "build", err
	}
	if err := t.objects.Put(id, objectValue(ext)); err != nil {
		t.freeExtent(ext)
		t.freeIDs = append(t.freeIDs, id)
		return nil, "build", fmt.Errorf("bpfunwind: object %d: %w", id, err)
	}
	return &object{id: id, ext: ext}, "", nil
}

// putRows writes rows from index first, in batches
// (BPF_MAP_UPDATE_BATCH, Linux 5.6), one by one where the kernel has no
// batch operations.
func (t *Tables) putRows(first uint32, rows []Row) error {
	const batch = 4096
	keys := make([]uint32, min(batch, len(rows)))
	for i := 0; i < len(rows); i += batch {
		j := min(i+batch, len(rows))
		k := keys[:j-i]
		for n := range k {
			k[n] = first + uint32(i+n)
		}
		if _, err := t.rows.BatchUpdate(k, rows[i:j], nil); err != nil {
			if !errors.Is(err, ebpf.ErrNotSupported) {
				return fmt.Errorf("bpfunwind: rows: %w", err)
			}
			for n := range k {
				if err := t.rows.Put(k[n], rows[i+n]); err != nil {
					return fmt.Errorf("bpfunwind: row %d: %w", k[n], err)
				}
			}
		}
	}
	return nil
}

// release drops one reference of each object; an object without
// references is freed: its object entry cleared, its id and rows put in
// quarantine for ReuseAfter (DefaultReuseAfter says why).
func (t *Tables) release(objs []*object) {
	now := monotonic()
	for _, o := range objs {
		o.refs--
		if o.refs > 0 {
			continue
		}
		delete(t.loaded, o.tab)
		// An empty entry: a walk that finds the id afterwards in a
		// process value it looked up before gets no rows (frame
		// pointers); one already searching the rows reads them
		// unchanged, as nothing is written there before ReuseAfter.
		t.objects.Put(o.id, make([]byte, 8))
		t.quarantine = append(t.quarantine, freed{o: o, at: now})
	}
}

// alloc finds n free rows: the first free extent that holds them, else
// the never-used tail.
func (t *Tables) alloc(n uint32) (extent, bool) {
	for i, f := range t.free {
		if f.count >= n {
			if f.count == n {
				t.free = append(t.free[:i], t.free[i+1:]...)
			} else {
				t.free[i] = extent{f.first + n, f.count - n}
			}
			return extent{f.first, n}, true
		}
	}
	if uint64(t.next)+uint64(n) > uint64(t.opts.Rows) {
		return extent{}, false
	}
	e := extent{t.next, n}
	t.next += n
	return e, true
}

// freeExtent returns e to the free list, merged with its neighbours.
func (t *Tables) freeExtent(e extent) {
	t.free = append(t.free, e)
	// Sorted by first, then adjacent extents merged.
	for i := len(t.free) - 1; i > 0 && t.free[i].first < t.free[i-1].first; i-- {
		t.free[i], t.free[i-1] = t.free[i-1], t.free[i]
	}
	out := t.free[:0]
	for _, f := range t.free {
		if n := len(out); n > 0 && out[n-1].first+out[n-1].count == f.first {
			out[n-1].count += f.count
			continue
		}
		out = append(out, f)
	}
	t.free = out
	if n := len(t.free); n > 0 && t.free[n-1].first+t.free[n-1].count == t.next {
		t.next = t.free[n-1].first
		t.free = t.free[:n-1]
	}
}

func (t *Tables) inUse() int {
	n := 0
	for _, o := range t.loaded {
		n += int(o.ext.count)
	}
	return n
}
