package symbolize

import (
	"debug/elf"
	"errors"
	"io"
	"os"
	"sync"
	"sync/atomic"

	"github.com/ianlancetaylor/demangle"
	"github.com/probekit/probekit/internal/safeelf"
	"github.com/probekit/probekit/procmaps"
)

// table is the symbol table of one file: immutable once built, shared by
// every Process and File that maps a file of that identity.
type table struct {
	id    procmaps.FileID
	funcs *safeelf.Funcs   // nil when the file could not be read
	goTab *safeelf.GoTable // nil for a file without .gopclntab
	loads safeelf.Segments
	err   error // why funcs is nil
	bytes int64 // estimated memory, charged against Options.MaxTableBytes

	// ref is the CLOCK bit: set by lookups, cleared by the eviction hand.
	ref atomic.Bool
	// evicted is set once the cache dropped the table; holders reload.
	evicted atomic.Bool
	// demangled caches demangled names by function index (string).
	demangled sync.Map
	// lookups counts lookups until the index is built; idx is the index
	// (see indexAfter), building is set while one lookup builds it.
	lookups  atomic.Int64
	idx      atomic.Pointer[addrIndex]
	building atomic.Bool
}

// tableOverhead is charged for a table besides its sections: the entry,
// the function index (about 40 bytes a function are added per function).
const tableOverhead = 4 << 10

// loadTable reads the function table of the ELF file f (left open: the
// caller closes it).
func loadTable(id procmaps.FileID, f io.ReaderAt) *table {
	t := &table{id: id, bytes: tableOverhead}
	ef, err := safeelf.NewFile(f)
	if err != nil {
		t.err = err
		return t
	}
	t.loads = ef.Loads()
	funcs, err := ef.Functions()
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
	for _, name := range []string{".symtab", ".strtab", ".dynsym", ".dynstr"} {
		if s := ef.Section(name); s != nil && s.Type != elf.SHT_NOBITS {
			t.bytes += int64(s.Size)
		}
	}
	if t.goTab != nil {
		if s := ef.Section(".gopclntab"); s != nil {
			t.bytes += int64(s.Size)
		}
		t.bytes += int64(len(t.goTab.Funcs)) * 40
	}
	// The function index and, once built, the address index.
	t.bytes += int64(funcs.Len()) * (40 + 40)
	return t
}

// frame fills fr (Function, Offset, File, Line) for the link-time address
// vaddr of the file.
func (t *table) frame(fr *Frame, vaddr uint64, dem bool) {
	if t.funcs == nil {
		return
	}
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
		file, line, fn := t.goTab.LineAt(vaddr)
		if line > 0 {
			fr.File, fr.Line = file, line
		}
		if !ok && fn != "" {
			// Only pclntab knows it (a function .symtab lacks).
			for _, g := range t.goFuncs(vaddr) {
				fr.Function, fr.Offset = g.Name, vaddr-g.Entry
			}
		}
	}
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
func (c *cache) get(id procmaps.FileID, open func() (*os.File, error)) (*table, error) {
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
	f, err := open()
	if err != nil {
		return nil, err
	}
	t := loadTable(id, f)
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
