package symbolize

import (
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"

	"github.com/ianlancetaylor/demangle"
	"github.com/probekit/probekit/debuginfo"
	"github.com/probekit/probekit/internal/safeelf"
	"github.com/probekit/probekit/procmaps"
)

// table is the symbol table of one file: immutable once built, shared by
// every Process and File that maps a file of that identity.
type table struct {
	id    procmaps.FileID
	funcs *safeelf.Funcs   // nil when the file could not be read
	goTab *safeelf.GoTable // nil for a file without .gopclntab
	// lines is the DWARF of the file or of its debug file (nil when
	// neither has any, and for Go, whose lines come from goTab).
	lines *debuginfo.Lines
	// index answers for lines from a line index (then lines is nil).
	index *debuginfo.LineIndex
	// symIndex is set when index answers for the symbol table too: then
	// funcs is nil, never read.
	symIndex bool
	loads    safeelf.Segments
	// buildID is the file's GNU build ID, in hex; "" without one.
	buildID string
	err     error // why funcs is nil
	bytes   int64 // estimated memory, charged against Options.MaxTableBytes

	// ref is the CLOCK bit: set by lookups, cleared by the eviction hand.
	ref atomic.Bool
	// evicted is set once the cache dropped the table; holders reload.
	evicted atomic.Bool
	// demangled caches demangled names by function index (string).
	demangled sync.Map
	// demangledNames caches demangled DWARF names by name.
	demangledNames sync.Map
	// lookups counts lookups until the index is built; idx is the index
	// (see indexAfter), building is set while one lookup builds it.
	lookups  atomic.Int64
	idx      atomic.Pointer[addrIndex]
	building atomic.Bool
}

// tableOverhead is charged for a table besides its sections: the entry,
// the function index (about 40 bytes a function are added per function).
const tableOverhead = 4 << 10

// debugSource is where loadTable looks for a file's debug information:
// the open object, its path (as the process sees it) and the process.
// nil means none (the vDSO image, or Options.NoDebugInfo).
type debugSource struct {
	obj  *os.File
	path string
	opts debuginfo.Options
	// index is the line index cache, nil for none.
	index *debuginfo.IndexCache
}

// linesShare is the fraction of Options.MaxTableBytes one file's DWARF
// unit tables may take (debuginfo.LinesOptions.MaxBytes): a table is
// charged its DWARF sections plus that ceiling.
const linesShare = 16

// findSup finds the supplementary file (dwz's common file) that the
// debug file d (dbg, as an ELF file) refers to: nil when it refers to
// none or it is not found, said to Options.DebugInfo.Warn (names kept
// there are then missing). The caller closes it.
func findSup(dbg *safeelf.File, d *debuginfo.File, src *debugSource) (*debuginfo.File, *debuginfo.SupLink) {
	link, err := debuginfo.ReadSupLink(dbg)
	if err != nil {
		src.warn(fmt.Errorf("%s: %w", d.Path, err))
		return nil, nil
	}
	if link == nil {
		return nil, nil
	}
	// Refused candidates are said as they come; "not found" only when
	// nothing was.
	warned := false
	opts := src.opts
	opts.Warn = func(err error) { warned = true; src.warn(err) }
	sf, err := debuginfo.FindSup(d, link, &opts)
	if err != nil {
		if !warned {
			src.warn(err)
		}
		return nil, nil
	}
	return sf, link
}

func (src *debugSource) warn(err error) {
	if src.opts.Warn != nil {
		src.opts.Warn(err)
	}
}

// openSup opens the DWARF of the supplementary file sf; nil when it does
// not read (said to Options.DebugInfo.Warn).
func openSup(sf *debuginfo.File, src *debugSource) *debuginfo.Lines {
	l, err := debuginfo.SupLines(sf)
	if err != nil {
		src.warn(err)
		return nil
	}
	return l
}

// indexKey is the identity of the DWARF of the object ef (build ID id)
// read from the debug file d (dbg as an ELF file, ef itself when the
// object carries its DWARF) and the supplementary file sf (nil for none,
// link its link); ok false when the object has no build ID or a file's
// identity is unreadable: such DWARF is not indexed. Its Digest hashes
// the sections of all three the index is built from (the object's
// symbols, the DWARF), so an index is used only for the bytes it was
// built from, whatever build ID a file claims.
func indexKey(id []byte, ef, dbg *safeelf.File, d *debuginfo.File, sf *debuginfo.File, link *debuginfo.SupLink) (*debuginfo.IndexKey, bool) {
	if len(id) == 0 {
		return nil, false
	}
	k := &debuginfo.IndexKey{BuildID: id, SupSize: -1}
	st, err := d.Stat()
	if err != nil {
		return nil, false
	}
	k.DebugSize = st.Size()
	if k.DebugID, err = dbg.BuildID(); err != nil {
		return nil, false
	}
	files := []*safeelf.File{ef, nil, nil}
	if dbg != ef {
		files[1] = dbg
	}
	if sf != nil {
		st, err := sf.Stat()
		if err != nil {
			return nil, false
		}
		k.SupID, k.SupSize = link.ID, st.Size()
		if files[2], err = safeelf.NewFile(sf); err != nil {
			return nil, false
		}
	}
	if k.Digest, err = debuginfo.SectionsDigest(files...); err != nil {
		return nil, false
	}
	return k, true
}

// debugLines is the DWARF of a debug file being opened: its
// supplementary file and the key of its line index, nil when it is not
// indexed.
type debugLines struct {
	dbg *safeelf.File
	d   *debuginfo.File
	sf  *debuginfo.File
	key *debuginfo.IndexKey
}

func (dl *debugLines) close() {
	if dl.sf != nil {
		dl.sf.Close()
	}
}

// cachedIndex looks for the line index of the object ef (build ID id) with
// the debug file d (dbg as an ELF file) and returns it, nil when there
// is none to use; dl says what to build one from.
func cachedIndex(id []byte, ef, dbg *safeelf.File, d *debuginfo.File, src *debugSource) (*debuginfo.LineIndex, *debugLines) {
	dl := &debugLines{dbg: dbg, d: d}
	var link *debuginfo.SupLink
	dl.sf, link = findSup(dbg, d, src)
	if src.index != nil {
		if key, ok := indexKey(id, ef, dbg, d, dl.sf, link); ok {
			dl.key = key
			x, err := src.index.Load(key)
			if err == nil {
				return x, dl
			}
			var bad *debuginfo.IndexError
			switch {
			case errors.Is(err, os.ErrNotExist) || errors.Is(err, debuginfo.ErrIndexKey):
				// None yet, or of other DWARF: built below.
			case errors.As(err, &bad):
				src.warn(fmt.Errorf("%s: %w (rebuilt)", d.Path, err))
			default:
				// The cache is refused or unreadable: the DWARF
				// serves, and no index is built that could not be
				// stored.
				src.warn(fmt.Errorf("%s: %w", d.Path, err))
				dl.key = nil
			}
		}
	}
	return nil, dl
}

// openLines gives t the DWARF lines of dl: read, and then indexed into
// the cache with t's functions when dl has a key (the index then serves
// t: its lookups are faster).
func (t *table) openLines(dl *debugLines, src *debugSource, maxBytes int64) {
	var sup *debuginfo.Lines
	if dl.sf != nil {
		sup = openSup(dl.sf, src)
	}
	dbg, d, key := dl.dbg, dl.d, dl.key
	// A file whose DWARF does not read keeps its functions.
	lmax := max(maxBytes/linesShare, 1<<20)
	l, err := debuginfo.OpenLinesELF(dbg, &debuginfo.LinesOptions{MaxBytes: lmax, Sup: sup})
	if err != nil {
		return
	}
	if key != nil {
		x, err := src.index.Store(key, l, indexSymbols(t.funcs))
		if err != nil {
			src.warn(fmt.Errorf("%s: line index not stored: %w", d.Path, err))
		}
		if x != nil {
			t.index = x
			t.bytes += x.Size()
			return
		}
	}
	t.lines = l
	t.bytes += l.SectionBytes() + lmax
	if sup != nil {
		t.bytes += sup.SectionBytes()
	}
}

// loadTable reads the function table of the ELF file f (left open: the
// caller closes it) and, with src, the debug information debuginfo.Find
// finds for it: the debug file's .symtab when f is stripped (its static
// functions), and the DWARF line tables and inlined calls.
func loadTable(id procmaps.FileID, f io.ReaderAt, src *debugSource, maxBytes int64) *table {
	t := &table{id: id, bytes: tableOverhead}
	ef, err := safeelf.NewFile(f)
	if err != nil {
		t.err = err
		return t
	}
	t.loads = ef.Loads()
	if id, err := ef.BuildID(); err == nil {
		t.buildID = hex.EncodeToString(id)
	}
	var dbg *safeelf.File // the file holding the DWARF: ef, or its debug file
	var dbgFile *debuginfo.File
	if src != nil {
		if d, err := debuginfo.Find(src.obj, src.path, &src.opts); err == nil {
			if d.Source == debuginfo.SourceSelf {
				dbg = ef
			} else if dbg, err = safeelf.NewFile(d); err != nil {
				dbg = nil
			}
			dbgFile = d
			defer d.Close()
		}
	}
	var dl *debugLines
	if dbg != nil && ef.Section(".gopclntab") == nil {
		// C, C++, Rust: an index of the same DWARF and symbols answers
		// for both, and neither is read.
		id, _ := ef.BuildID()
		var x *debuginfo.LineIndex
		x, dl = cachedIndex(id, ef, dbg, dbgFile, src)
		defer dl.close()
		if x != nil && x.HasSymbols() {
			t.index, t.symIndex = x, true
			t.bytes += x.Size()
			return t
		}
	}
	var funcs *safeelf.Funcs
	var mini *safeelf.File // the MiniDebugInfo whose .symtab joined funcs
	switch {
	case dbg != nil && dbg != ef:
		funcs, err = ef.FunctionsWith(dbg)
	case dbg == nil && src != nil && ef.SectionByType(elf.SHT_SYMTAB) == nil:
		// Stripped, no debug file: its MiniDebugInfo's static functions.
		// One that does not read leaves the object's own table.
		if f, m, merr := debuginfo.MiniFunctions(ef); merr == nil {
			mini, funcs = m, f
			break
		}
		funcs, err = ef.Functions()
	default:
		funcs, err = ef.Functions()
	}
	if err != nil {
		t.err = err
		return t
	}
	t.funcs = funcs
	t.goTab = funcs.Go
	if t.goTab == nil && ef.Section(".gopclntab") != nil {
		// Go with symbols: .symtab names the functions, pclntab gives
		// the lines. A table that does not decode only loses lines.
		if gt, err := ef.GoTable(); err == nil {
			t.goTab = gt
		}
	}
	if t.goTab == nil && dl != nil {
		t.openLines(dl, src, maxBytes)
	}
	syms := ef
	switch {
	case t.funcs.SymtabFromDebug && mini != nil:
		syms = mini
	case t.funcs.SymtabFromDebug:
		syms = dbg
	}
	for _, name := range []string{".symtab", ".strtab", ".dynsym", ".dynstr"} {
		if s := syms.Section(name); s != nil && s.Type != elf.SHT_NOBITS {
			t.bytes += int64(s.Size)
		}
	}
	if t.goTab != nil {
		if s := ef.Section(".gopclntab"); s != nil {
			t.bytes += int64(s.Size)
		}
		t.bytes += int64(len(t.goTab.Funcs))*40 + t.goTab.InlineBytes()
	}
	// The function index and, once built, the address index.
	t.bytes += int64(funcs.Len()) * (40 + 40)
	return t
}

// readable reports whether the file was read as ELF (a table that
// names nothing else).
func (t *table) readable() bool { return t.funcs != nil || t.symIndex }

// frames appends the frames of the link-time address vaddr of the file
// to dst: the inline chain, innermost first, each a copy of base (Address
// and Object) with Function, Offset, File, Line and Inlined set. Without
// DWARF (or pclntab inline data) that is one frame.
func (t *table) frames(dst []Frame, base Frame, vaddr uint64, dem bool) []Frame {
	if t.symIndex {
		return t.indexFrames(dst, base, vaddr, dem)
	}
	if t.funcs == nil {
		return append(dst, base)
	}
	fr := base
	var i int
	var ok bool
	if x := t.idx.Load(); x != nil {
		if i, ok = x.at(vaddr); ok {
			fr.Function = x.names[i]
		}
	} else {
		if t.lookups.Add(1) == indexAfter && t.building.CompareAndSwap(false, true) {
			if x := buildIndex(t.funcs); x != nil {
				t.idx.Store(x)
			}
		}
		if i, ok = t.funcs.At(vaddr); ok {
			fr.Function = t.funcs.Name(i)
		}
	}
	if ok {
		fr.Offset = vaddr - t.funcs.Address(i)
		if dem && isMangled(fr.Function) {
			fr.Function = t.demangle(i, fr.Function)
		}
	}
	if t.goTab != nil {
		return t.goFrames(dst, fr, vaddr, ok)
	}
	var buf [8]debuginfo.SourceFrame
	var sfs []debuginfo.SourceFrame
	var err error
	switch {
	case t.index != nil:
		sfs, err = t.index.Frames(buf[:0], vaddr)
	case t.lines != nil:
		sfs, err = t.lines.Frames(buf[:0], vaddr)
	default:
		return append(dst, fr)
	}
	return t.sourceFrames(dst, base, fr, vaddr, sfs, err, dem)
}

// indexFrames is frames from a line index that holds the symbols too.
func (t *table) indexFrames(dst []Frame, base Frame, vaddr uint64, dem bool) []Frame {
	var buf [8]debuginfo.SourceFrame
	sfs, sym, ok, err := t.index.Lookup(buf[:0], vaddr)
	return t.indexSourceFrames(dst, base, vaddr, sfs, sym, ok, err, dem)
}

// indexSourceFrames is indexFrames after the lookup.
func (t *table) indexSourceFrames(dst []Frame, base Frame, vaddr uint64, sfs []debuginfo.SourceFrame, sym debuginfo.IndexSymbol, ok bool, err error, dem bool) []Frame {
	fr := base
	if ok {
		fr.Function, fr.Offset = sym.Name, vaddr-sym.Start
		if dem && isMangled(fr.Function) {
			fr.Function = t.demangleName(fr.Function)
		}
	}
	return t.sourceFrames(dst, base, fr, vaddr, sfs, err, dem)
}

// sourceFrames appends the frames of vaddr from its DWARF frames sfs (fr
// is its frame from the symbol table).
func (t *table) sourceFrames(dst []Frame, base, fr Frame, vaddr uint64, sfs []debuginfo.SourceFrame, err error, dem bool) []Frame {
	if err != nil || len(sfs) == 0 {
		return append(dst, fr)
	}
	for k, sf := range sfs {
		f := base
		f.File, f.Line, f.Inlined = sf.File, sf.Line, sf.Inlined
		switch {
		case sf.Function == "" && k == len(sfs)-1:
			// No DWARF function (assembly, padding): the table's.
			f.Function, f.Offset = fr.Function, fr.Offset
		case dem && isMangled(sf.Function):
			f.Function = t.demangleName(sf.Function)
		default:
			f.Function = sf.Function
		}
		if k == len(sfs)-1 && sf.Function != "" {
			f.Offset = fr.Offset
			if sf.Entry != 0 && sf.Entry <= vaddr {
				f.Offset = vaddr - sf.Entry
			}
		}
		dst = append(dst, f)
	}
	return dst
}

// goFuncs returns the pclntab function holding pc, if any (0 or 1).
func (t *table) goFuncs(pc uint64) []safeelf.GoFunc {
	fs := t.goTab.Funcs
	lo, hi := 0, len(fs)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if fs[m].End <= pc {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(fs) && fs[lo].Entry <= pc {
		return fs[lo : lo+1]
	}
	return nil
}

// isMangled reports whether name is an Itanium C++ ("_Z") or Rust v0
// ("_R") mangled name.
func isMangled(name string) bool {
	return len(name) > 2 && name[0] == '_' && (name[1] == 'Z' || name[1] == 'R')
}

// demangleName demangles a DWARF linkage name (cached by name).
func (t *table) demangleName(name string) string {
	if v, ok := t.demangledNames.Load(name); ok {
		return v.(string)
	}
	d, err := demangle.ToString(name)
	if err != nil {
		d = name
	}
	t.demangledNames.Store(name, d)
	return d
}

func (t *table) demangle(i int, name string) string {
	if v, ok := t.demangled.Load(i); ok {
		return v.(string)
	}
	d, err := demangle.ToString(name)
	if err != nil {
		d = name
	}
	t.demangled.Store(i, d)
	return d
}

// cache holds the tables by file identity. Lookups (get) are lock-free:
// a sync.Map load and an atomic store of the CLOCK bit. Inserting takes
// mu and evicts with the CLOCK algorithm (second chance, an LRU
// approximation) until the estimated bytes are within max.
type cache struct {
	max     int64
	tables  sync.Map // procmaps.FileID -> *slot
	mu      sync.Mutex
	ring    []*table // the CLOCK ring, under mu
	hand    int
	total   int64
	loading sync.Map // procmaps.FileID -> *load: one reader per file
}

type load struct {
	done chan struct{}
	t    *table
}

type slot struct{ t *table }

// get returns the table of id, reading it with open on a miss. Callers
// that miss concurrently share one read.
func (c *cache) get(id procmaps.FileID, open func() (*os.File, *debugSource, error)) (*table, error) {
	if v, ok := c.tables.Load(id); ok {
		t := v.(*slot).t
		if !t.ref.Load() {
			t.ref.Store(true)
		}
		return t, nil
	}
	l := &load{done: make(chan struct{})}
	if v, loaded := c.loading.LoadOrStore(id, l); loaded {
		l = v.(*load)
		<-l.done
		if l.t == nil {
			return c.get(id, open) // the other reader's open failed
		}
		return l.t, nil
	}
	defer func() {
		c.loading.Delete(id)
		close(l.done)
	}()
	f, src, err := open()
	if err != nil {
		return nil, err
	}
	t := loadTable(id, f, src, c.max)
	f.Close()
	l.t = t
	c.insert(t)
	return t, nil
}

// adopt puts back a table the cache evicted while a holder kept it (the
// holder uses it again, so it is recent): no file is read again, which
// also serves a process that has exited since. It returns the cached
// table of that file, t or one read meanwhile.
func (c *cache) adopt(t *table) *table {
	c.mu.Lock()
	defer c.mu.Unlock()
	if v, ok := c.tables.Load(t.id); ok {
		return v.(*slot).t
	}
	t.evicted.Store(false)
	c.insertLocked(t)
	return t
}

func (c *cache) insert(t *table) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.insertLocked(t)
}

func (c *cache) insertLocked(t *table) {
	for c.total+t.bytes > c.max && len(c.ring) > 0 {
		if c.hand >= len(c.ring) {
			c.hand = 0
		}
		v := c.ring[c.hand]
		if v.ref.Load() {
			v.ref.Store(false)
			c.hand++
			continue
		}
		v.evicted.Store(true)
		c.tables.Delete(v.id)
		c.total -= v.bytes
		c.ring[c.hand] = c.ring[len(c.ring)-1]
		c.ring[len(c.ring)-1] = nil
		c.ring = c.ring[:len(c.ring)-1]
	}
	t.ref.Store(true)
	c.ring = append(c.ring, t)
	c.total += t.bytes
	c.tables.Store(t.id, &slot{t})
}

// isGone reports whether err says the process exited or its PID was
// reused: such errors end a symbolization, others only leave an object
// unnamed.
func isGone(err error) bool {
	return errors.Is(err, procmaps.ErrProcessGone) || errors.Is(err, procmaps.ErrProcessChanged)
}

// goFrames is frames for Go code: the inline chain from pclntab's inline
// trees, file and line from pclntab; the physical function keeps the
// table's name and offset (pclntab's when the table lacks it).
func (t *table) goFrames(dst []Frame, fr Frame, vaddr uint64, named bool) []Frame {
	var buf [8]safeelf.GoFrame
	gfs := t.goTab.Frames(buf[:0], vaddr)
	if len(gfs) == 0 {
		return append(dst, fr)
	}
	last := gfs[len(gfs)-1]
	for _, g := range gfs[:len(gfs)-1] {
		f := fr
		f.Function, f.Offset, f.File, f.Line, f.Inlined = g.Function, 0, g.File, g.Line, true
		dst = append(dst, f)
	}
	if last.Line > 0 {
		fr.File, fr.Line = last.File, last.Line
	}
	if !named {
		// Only pclntab knows it (a function .symtab lacks).
		for _, g := range t.goFuncs(vaddr) {
			fr.Function, fr.Offset = g.Name, vaddr-g.Entry
		}
	}
	return append(dst, fr)
}
