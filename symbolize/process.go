package symbolize

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/probekit/probekit/procmaps"
)

// Process symbolizes the runtime addresses of one process (identified
// by PID and start time, so a reused PID is detected). It keeps a
// snapshot of the process's maps, read again when an address falls
// outside every mapping, and is safe for concurrent use.
type Process struct {
	s    *Symbolizer
	proc *procmaps.Process
	snap atomic.Pointer[snapshot]
	// perf is the process's perf map, read on the first address in
	// anonymous executable memory and again when the file grew.
	perfMu sync.Mutex
	perf   atomic.Pointer[perfState]
	// vdsoTab is the table of the process's vDSO, read on first use.
	vdsoTab atomic.Pointer[table]
}

type perfState struct {
	path string // as the process sees it
	m    *PerfMap
	err  error
	// checked is when the file was last looked at, under perfMu.
	checked time.Time
}

// perfMapRecheck is how often, at most, addresses missing from a process's
// perf map make it look at the file again: JIT frames of a runtime that
// writes none would otherwise each cost an open.
const perfMapRecheck = 50 * time.Millisecond

// snapshot is one reading of /proc/PID/maps, immutable but for the table
// pointers of its objects.
type snapshot struct {
	maps []mapping // in address order, as maps lists them
	read time.Time
}

// mapsRecheck is how often, at most, an address outside every mapping
// makes a Process read the maps again: a stack with a garbage frame in
// every sample would otherwise read them for each.
const mapsRecheck = 10 * time.Millisecond

type mapping struct {
	start, end, offset uint64
	perms              procmaps.Perms
	name               string // Path as maps prints it, or a pseudo name
	obj                *object
}

// object is one file of a snapshot: its identity and the table read for
// it (loaded on first use, replaced when the cache evicted it).
type object struct {
	o   procmaps.Object
	tab atomic.Pointer[table]
	// failed is set when the file could not be opened (not for the
	// process's end): it is not tried again for this process.
	failed atomic.Bool
}

// Process opens the process pid for symbolization; it reads its maps.
func (s *Symbolizer) Process(pid int) (*Process, error) {
	pp, err := procmaps.Open(pid)
	if err != nil {
		return nil, err
	}
	return s.ProcessOf(pp)
}

// ProcessOf is Process for a process identity the caller already holds
// (an attached tracer's).
func (s *Symbolizer) ProcessOf(pp *procmaps.Process) (*Process, error) {
	p := &Process{s: s, proc: pp}
	if _, err := p.refresh(); err != nil {
		return nil, err
	}
	return p, nil
}

// refresh reads the maps again. procmaps checks the process's identity
// after the read, so the snapshot is the process's or an error.
func (p *Process) refresh() (*snapshot, error) {
	ms, _, err := p.proc.Mappings()
	if err != nil {
		return nil, err
	}
	sn := &snapshot{maps: make([]mapping, 0, len(ms)), read: time.Now()}
	objs := map[procmaps.FileID]*object{}
	// The tables (and failures) the previous snapshot found carry over.
	prev := map[procmaps.FileID]*object{}
	if old := p.snap.Load(); old != nil {
		for _, m := range old.maps {
			if m.obj != nil {
				prev[m.obj.o.ID()] = m.obj
			}
		}
	}
	for _, m := range ms {
		mp := mapping{start: m.Start, end: m.End, offset: m.Offset, perms: m.Perms, name: m.Path}
		if m.FileBacked() {
			o := objs[m.ID()]
			if o == nil {
				o = &object{o: procmaps.Object{Path: m.Path, Dev: m.Dev, Inode: m.Inode, Deleted: m.Deleted}}
				if po := prev[m.ID()]; po != nil {
					o.tab.Store(po.tab.Load())
					o.failed.Store(po.failed.Load())
				}
				objs[m.ID()] = o
			}
			o.o.Mappings = append(o.o.Mappings, m)
			mp.obj = o
		}
		sn.maps = append(sn.maps, mp)
	}
	p.snap.Store(sn)
	return sn, nil
}

// find returns the mapping holding addr, or nil.
func (sn *snapshot) find(addr uint64) *mapping {
	lo, hi := 0, len(sn.maps)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if sn.maps[m].end <= addr {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(sn.maps) && sn.maps[lo].start <= addr {
		return &sn.maps[lo]
	}
	return nil
}

// Refresh reads the process's maps again now. Symbolize does so by itself
// for an address outside every mapping (at most every 10 ms); a caller
// that knows the process unmapped a library and mapped another at the
// same addresses (dlclose, then dlopen) calls Refresh, as the old snapshot
// would name the old library's functions.
func (p *Process) Refresh() error {
	_, err := p.refresh()
	return err
}

// PID is the process's PID.
func (p *Process) PID() int { return p.proc.PID }

// Symbolize returns the frames of each runtime address, in order: one
// per address, or its inline chain (see Frame). An address outside every
// mapping makes it read the maps again (the process may have loaded a
// library since; at most every 10 ms); one still outside gets a frame
// with only its address. It fails, naming no function, with an error
// matching procmaps.ErrProcessGone or ErrProcessChanged when the process
// exited or its PID was reused: the process's identity is checked after
// the addresses are looked up.
func (p *Process) Symbolize(addrs []uint64) ([]Frame, error) {
	frames, err := p.SymbolizeInto(make([]Frame, 0, len(addrs)), addrs)
	if err != nil {
		return nil, err
	}
	return frames, nil
}

// SymbolizeInto is Symbolize appending to dst; with room in dst it
// allocates nothing. On error it returns dst unchanged.
func (p *Process) SymbolizeInto(dst []Frame, addrs []uint64) ([]Frame, error) {
	return p.symbolize(dst, addrs, true, false)
}

// SymbolizeRecorded is SymbolizeInto for addresses recorded while the
// process ran (a stack a BPF program captured) and named after it may have
// exited: the names come from the maps snapshot and the tables read while
// the process was known to be the one opened, and its end is not an
// error. A file whose table was not read before the end leaves its frames
// with the object only; Preload at attach time reads them all.
func (p *Process) SymbolizeRecorded(dst []Frame, addrs []uint64) ([]Frame, error) {
	return p.symbolize(dst, addrs, false, false)
}

// Stack is SymbolizeInto for a call stack, innermost first: stack[0] is
// where the thread was, each later address a return address (what a
// frame-pointer walk or bpf_get_stack gives).
//
// The one rule for return addresses: each is named at the byte before it,
// which lies in the call instruction, so its frames are the caller's
// function and the call's file and line (what addr2line prints for the
// return address minus one; the return address itself may already be the
// first byte of the next function, after a call that does not return).
// The frames keep the return address as their Address, and Offset is
// from the function's start to the return address.
func (p *Process) Stack(dst []Frame, stack []uint64) ([]Frame, error) {
	return p.symbolize(dst, stack, true, true)
}

// StackRecorded is Stack for a stack recorded while the process ran (see
// SymbolizeRecorded).
func (p *Process) StackRecorded(dst []Frame, stack []uint64) ([]Frame, error) {
	return p.symbolize(dst, stack, false, true)
}

// Preload reads the tables of every executable file the process maps (and
// of its vDSO) now, so that SymbolizeRecorded names their code after the
// process exited.
func (p *Process) Preload() error {
	sn, err := p.refresh()
	if err != nil {
		return err
	}
	perfMap := false
	for i := range sn.maps {
		m := &sn.maps[i]
		if m.perms&procmaps.Exec != 0 && m.obj == nil && m.name != "[vdso]" && !perfMap {
			// Anonymous executable memory: a JIT's. Its perf map is
			// read now too, while the process runs: a stack read after
			// it exited (a launched command's, at its exit stop) is
			// named from it.
			perfMap = true
			if _, err := p.readPerfMap(p.perf.Load(), true); err != nil {
				return err
			}
		}
		if m.perms&procmaps.Exec == 0 || (m.obj == nil && m.name != "[vdso]") {
			continue
		}
		var fr Frame
		if _, _, err := p.frame(&fr, m, m.start); err != nil {
			return err
		}
	}
	return p.proc.Check()
}

// MappingOf returns the mapping holding addr in the last maps the
// process was read with (see Stacks.Mapping), without reading them
// again: it serves after the process exited.
func (p *Process) MappingOf(addr uint64) (Mapping, bool) {
	m := p.snap.Load().find(addr)
	if m == nil {
		return Mapping{}, false
	}
	out := Mapping{Start: m.start, End: m.end, Offset: m.offset, Object: m.name}
	if m.obj != nil {
		if t := m.obj.tab.Load(); t != nil {
			out.BuildID = t.buildID
		}
	}
	return out, true
}

func (p *Process) symbolize(dst []Frame, addrs []uint64, live, stack bool) ([]Frame, error) {
	start := len(dst)
	sn := p.snap.Load()
	refreshed := false
	for i, a := range addrs {
		look := a
		if stack && i > 0 && a > 0 {
			look = a - 1 // in the call instruction (see Stack)
		}
		m := sn.find(look)
		if m == nil && !refreshed && time.Since(sn.read) >= mapsRecheck {
			refreshed = true
			if fresh, err := p.refresh(); err == nil {
				sn = fresh
			} else if live || !isGone(err) {
				return dst[:start], err
			}
			m = sn.find(look)
		}
		fr := Frame{Address: look}
		if m == nil {
			dst = append(dst, Frame{Address: a})
			continue
		}
		n := len(dst)
		t, vaddr, err := p.frame(&fr, m, look)
		if err != nil && (live || !isGone(err)) {
			return dst[:start], err
		}
		if t != nil {
			dst = t.frames(dst, fr, vaddr, p.s.demangle && t != p.vdsoTab.Load())
		} else {
			dst = append(dst, fr)
		}
		if look != a {
			for k := n; k < len(dst); k++ {
				dst[k].Address = a
				if dst[k].Function != "" && !dst[k].Inlined {
					dst[k].Offset += a - look
				}
			}
		}
	}
	if !live {
		return dst, nil
	}
	if err := p.proc.Check(); err != nil {
		return dst[:start], err
	}
	return dst, nil
}

// frame fills fr's object (and function, for JIT code) for addr in m,
// and returns the table and link-time address that name it, if any.
func (p *Process) frame(fr *Frame, m *mapping, addr uint64) (*table, uint64, error) {
	if m.obj == nil && m.name == "[vdso]" {
		fr.Object = m.name
		return p.vdso(m, addr)
	}
	if m.obj == nil {
		fr.Object = m.name
		if fr.Object == "" {
			fr.Object = "[anon]"
		}
		if m.perms&procmaps.Exec != 0 && (m.name == "" || strings.HasPrefix(m.name, "[anon")) {
			return nil, 0, p.jit(fr, addr)
		}
		return nil, 0, nil
	}
	o := m.obj
	fr.Object = o.o.Path
	exec := m.perms&procmaps.Exec != 0
	t := o.tab.Load()
	if t != nil && t.evicted.Load() {
		t = p.s.cache.adopt(t)
		o.tab.Store(t)
	}
	if t == nil {
		if o.failed.Load() {
			return nil, 0, p.jitIf(exec, fr, addr)
		}
		var err error
		if t, err = p.table(o); err != nil {
			if isGone(err) {
				return nil, 0, err
			}
			o.failed.Store(true)
			// Unreadable: the object is named, the function not.
			return nil, 0, p.jitIf(exec, fr, addr)
		}
	} else if !t.ref.Load() {
		t.ref.Store(true)
	}
	if !t.readable() {
		// Not ELF: code in shared anonymous memory ("/dev/zero
		// (deleted)") or a memfd, which JITs use too.
		return nil, 0, p.jitIf(exec, fr, addr)
	}
	off := m.offset + (addr - m.start)
	vaddr, ok := t.loads.Address(off, exec)
	if !ok {
		return nil, 0, nil
	}
	return t, vaddr, nil
}

// table returns o's table, reading the file through the process's root
// (procmaps.OpenObject: identity checked, map_files for deleted files).
func (p *Process) table(o *object) (*table, error) {
	t, err := p.s.cache.get(o.o.ID(), func() (*os.File, *debugSource, error) {
		f, err := p.proc.OpenObject(&o.o)
		if err != nil {
			return nil, nil, err
		}
		return f, p.s.source(f, o.o.Path, p.proc), nil
	})
	if err != nil {
		return nil, err
	}
	o.tab.Store(t)
	return t, nil
}

// jitIf is jit for executable memory.
func (p *Process) jitIf(exec bool, fr *Frame, addr uint64) error {
	if !exec {
		return nil
	}
	return p.jit(fr, addr)
}

// jit names addr in anonymous executable memory from the process's perf
// map, read inside its root at /tmp/perf-NSPID.map (NSPID: its PID in its
// own PID namespace, which is what it names the file with).
func (p *Process) jit(fr *Frame, addr uint64) error {
	st := p.perf.Load()
	if st != nil && st.m != nil {
		if name, off, ok := st.m.Lookup(addr); ok {
			fr.Function, fr.Offset, fr.Object = name, off, st.path
			return nil
		}
	}
	st, err := p.readPerfMap(st, false)
	if err != nil {
		return err
	}
	if st.m != nil {
		if name, off, ok := st.m.Lookup(addr); ok {
			fr.Function, fr.Offset, fr.Object = name, off, st.path
		}
	}
	return nil
}

// readPerfMap reads the perf map again when it grew since old was read
// (old may be nil), at most every perfMapRecheck unless force is set.
// Errors other than the process's end are kept in the state: no perf map
// is normal.
func (p *Process) readPerfMap(old *perfState, force bool) (*perfState, error) {
	p.perfMu.Lock()
	defer p.perfMu.Unlock()
	if cur := p.perf.Load(); cur != old {
		return cur, nil // another goroutine read it meanwhile
	}
	if old != nil && !force && time.Since(old.checked) < perfMapRecheck {
		return old, nil
	}
	path := ""
	if old != nil {
		path = old.path
	} else {
		nspid, err := nsPID(p.proc.PID)
		if err != nil {
			if isGone(err) || errors.Is(err, os.ErrNotExist) {
				return nil, fmt.Errorf("%v: %w", p.proc, procmaps.ErrProcessGone)
			}
			nspid = p.proc.PID
		}
		path = "/tmp/perf-" + strconv.Itoa(nspid) + ".map"
	}
	st := &perfState{path: path}
	f, err := p.proc.OpenOwned(path)
	if err != nil {
		if isGone(err) {
			return nil, err
		}
		st.err, st.checked = err, time.Now()
		p.perf.Store(st)
		return st, nil
	}
	defer f.Close()
	var prev *PerfMap
	if old != nil && old.m != nil {
		prev = old.m
		if fi, err := f.Stat(); err == nil && fi.Size() <= prev.size || prev.Truncated {
			old.checked = time.Now()
			return old, nil // nothing new
		}
		// The file is only appended to: read what was added.
		if _, err := f.Seek(prev.size, io.SeekStart); err != nil {
			st.err = err
			p.perf.Store(st)
			return st, nil
		}
	}
	st.m, st.err = parsePerfMap(f, prev, true, MaxPerfMapBytes, MaxPerfMapEntries)
	st.checked = time.Now()
	p.perf.Store(st)
	return st, nil
}

// nsPID returns the PID of pid in its innermost PID namespace (the last
// field of the NSpid line of /proc/PID/status, Linux 4.1).
func nsPID(pid int) (int, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "NSpid:"); ok {
			fs := strings.Fields(rest)
			if len(fs) > 0 {
				return strconv.Atoi(fs[len(fs)-1])
			}
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return pid, nil
}

// maxVDSO bounds the vDSO image read from a process's memory (the
// kernel's is two to four pages).
const maxVDSO = 1 << 20

// vdso names addr in the process's [vdso] mapping: the vDSO is an ELF
// image the kernel maps into every process, read from the process's
// memory (/proc/PID/mem). Its table is shared by the processes whose
// images are identical.
func (p *Process) vdso(m *mapping, addr uint64) (*table, uint64, error) {
	t := p.vdsoTab.Load()
	if t == nil {
		var err error
		if t, err = p.readVDSO(m); err != nil {
			return nil, 0, err
		}
	}
	if vaddr, ok := t.loads.Address(addr-m.start, true); ok {
		return t, vaddr, nil
	}
	return nil, 0, nil
}

func (p *Process) readVDSO(m *mapping) (*table, error) {
	none := &table{} // no names, not read again
	if m.end-m.start > maxVDSO {
		p.vdsoTab.Store(none)
		return none, nil
	}
	f, err := os.Open("/proc/" + strconv.Itoa(p.proc.PID) + "/mem")
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%v: %w", p.proc, procmaps.ErrProcessGone)
		}
		p.vdsoTab.Store(none)
		return none, nil
	}
	img := make([]byte, m.end-m.start)
	_, err = f.ReadAt(img, int64(m.start))
	f.Close()
	// The memory read must be the process's: its identity is checked
	// after the read.
	if err := p.proc.Check(); err != nil {
		return nil, err
	}
	if err != nil {
		p.vdsoTab.Store(none)
		return none, nil
	}
	t := p.s.vdsoTable(img)
	p.vdsoTab.Store(t)
	return t, nil
}
