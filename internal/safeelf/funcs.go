package safeelf

import (
	"cmp"
	"debug/elf"
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"unsafe"

	"github.com/probekit/probekit/internal/glob"
)

// Source says which table a function came from.
type Source uint8

const (
	// SourceSymtab is .symtab (removed by strip).
	SourceSymtab Source = iota + 1
	// SourceDynsym is .dynsym (exported symbols, with versions).
	SourceDynsym
	// SourcePCLNTab is the Go runtime's function table, kept by -s -w.
	SourcePCLNTab
)

func (s Source) String() string {
	switch s {
	case SourceSymtab:
		return ".symtab"
	case SourceDynsym:
		return ".dynsym"
	case SourcePCLNTab:
		return ".gopclntab"
	}
	return fmt.Sprintf("Source(%d)", uint8(s))
}

// Func is one function of a file.
type Func struct {
	// Name as in the table: mangled for C++, package-qualified for Go,
	// without any version. It shares the string table's bytes.
	Name string
	// Version is the GNU version of the .dynsym entry, "" for none.
	Version string
	// VersionHidden is true for name@VERSION, false for name@@VERSION.
	VersionHidden bool
	// Address is the link-time virtual address (st_value, or the
	// pclntab entry).
	Address uint64
	// Offset is the file offset of the first instruction.
	Offset uint64
	// Size in bytes, 0 when the table does not say.
	Size uint64
	// Global is true for STB_GLOBAL, STB_WEAK and STB_GNU_UNIQUE.
	Global bool
	// Source is the table the function was read from; a function in both
	// .symtab and .dynsym is listed once, from .symtab, with the version
	// .dynsym gives it.
	Source Source
}

// String returns name, name@VERSION or name@@VERSION.
func (f Func) String() string {
	switch {
	case f.Version == "":
		return f.Name
	case f.VersionHidden:
		return f.Name + "@" + f.Version
	default:
		return f.Name + "@@" + f.Version
	}
}

// Funcs are the functions of a file: the STT_FUNC symbols of .symtab and
// .dynsym whose address lies in an executable PT_LOAD backed by the file,
// one entry per (name, address); for a Go program without function
// symbols (go build -ldflags=-s), the functions of .gopclntab. They are
// sorted by address (then by table and entry), which gives lookup by address; lookup by
// name builds a hash index on first use. Funcs is immutable and safe for
// concurrent use.
type Funcs struct {
	// Symtab, Dynsym and Go are the tables read, nil when absent (Go is
	// read only when the symbols lack the Go runtime's functions).
	Symtab, Dynsym *Symbols
	Go             *GoTable
	// SymtabFromDebug is set when Symtab is the separate debug file's
	// (FunctionsWith).
	SymtabFromDebug bool
	// Skipped counts function symbols outside every executable,
	// file-backed segment: nothing to probe there.
	Skipped int

	loads Segments
	seed  uint64    // of the name hashes
	refs  []funcRef // sorted by address, then source and entry index

	byName  func() *nameIndex
	maxEnds func() []uint64
}

// funcRef is one function: 32 bytes, no pointer (the garbage collector
// does not scan a 100k-entry index). It carries what listing needs
// besides the name's bytes, taken while the table is read in order:
// decoding a function in address order then touches its name and
// nothing else of the tables.
type funcRef struct {
	addr uint64
	// hash is the name's hash (seeded per Funcs): folding twins compares
	// hashes, not names scattered over the string tables, and the name
	// index is built from it.
	hash uint64
	// name is st_name, the name's offset in its table's strings.
	name uint32
	// size is st_size (the larger of twins', the pclntab extent), or
	// sizeInTable when it does not fit: read it from the table then.
	size uint32
	// ref is the source in its top two bits, refGlobal, and the entry
	// index in its table in the low 24 bits (maxSymbols).
	ref uint32
	// dyn is 1 + the .dynsym index of the same function listed from
	// .symtab, whose version it contributes; 0 for none.
	dyn uint32
}

const (
	refGlobal   = 1 << 29
	refIndex    = 1<<24 - 1
	sizeInTable = ^uint32(0)
)

func (r funcRef) src() Source  { return Source(r.ref >> 30) }
func (r funcRef) idx() int     { return int(r.ref & refIndex) }
func (r funcRef) global() bool { return r.ref&refGlobal != 0 }

func mkRef(addr uint64, src Source, i int, global bool, size uint64) funcRef {
	r := funcRef{addr: addr, ref: uint32(src)<<30 | uint32(i), size: sizeInTable}
	if global {
		r.ref |= refGlobal
	}
	if size < uint64(sizeInTable) {
		r.size = uint32(size)
	}
	return r
}

// Functions reads the functions of f (see Funcs). A file without any
// function table gives an empty Funcs, not an error; a corrupt table is a
// *FormatError.
func (f *File) Functions() (*Funcs, error) { return f.FunctionsWith(nil) }

// FunctionsWith reads the functions of f as Functions does, taking the
// .symtab of debug, the separate debug file of f, when f has none
// (stripped): its static functions then join the table. A debug file of
// the same build (same build ID, or a matching debuglink CRC) has the
// addresses of f, so its symbols are placed through f's segments. A nil
// debug is Functions.
func (f *File) FunctionsWith(debug *File) (*Funcs, error) {
	t := &Funcs{loads: f.Loads(), seed: rand.Uint64()}
	var err error
	if t.Symtab, err = f.Symbols(); err != nil && !errors.Is(err, ErrNoSymbols) {
		return nil, fmt.Errorf(".symtab: %w", err)
	}
	if t.Symtab == nil && debug != nil {
		if t.Symtab, err = debug.Symbols(); err != nil && !errors.Is(err, ErrNoSymbols) {
			return nil, fmt.Errorf("debug file's .symtab: %w", err)
		}
		t.SymtabFromDebug = t.Symtab != nil
	}
	if t.Dynsym, err = f.DynamicSymbols(); err != nil && !errors.Is(err, ErrNoSymbols) {
		return nil, fmt.Errorf(".dynsym: %w", err)
	}
	// Counted first, so that the index is allocated once.
	n := t.collect(t.Symtab, SourceSymtab, true) + t.collect(t.Dynsym, SourceDynsym, true)
	t.refs = make([]funcRef, 0, n)
	t.collect(t.Symtab, SourceSymtab, false)
	t.collect(t.Dynsym, SourceDynsym, false)

	if f.Section(".gopclntab") != nil && !t.hasGoRuntime() {
		switch gt, err := f.GoTable(); {
		case errors.Is(err, ErrNoSymbols):
		case err != nil:
			return nil, err
		default:
			if err := t.addGo(gt, f.Section(".gopclntab").Offset); err != nil {
				return nil, err
			}
		}
	}
	t.sort()
	t.byName = sync.OnceValue(func() *nameIndex {
		return newNameIndex(len(t.refs), func(i int) (uint64, bool) { return t.refs[i].hash, true })
	})
	t.maxEnds = sync.OnceValue(t.prefixMaxEnds)
	return t, nil
}

// collect appends the defined, named STT_FUNC entries of s that lie in
// code, or with count set only counts them.
func (t *Funcs) collect(s *Symbols, src Source, count bool) int {
	if s == nil {
		return 0
	}
	n := 0
	for i := 1; i < s.n; i++ {
		r := s.rawAt(i)
		if elf.ST_TYPE(r.info) != elf.STT_FUNC || r.shndx == uint16(elf.SHN_UNDEF) || r.name == 0 {
			continue
		}
		if count {
			n++ // an upper bound: not checked against the segments
			continue
		}
		if _, ok := t.loads.CodeOffset(r.value); !ok {
			t.Skipped++
			continue
		}
		n++
		ref := mkRef(r.value, src, i, elf.ST_BIND(r.info) != elf.STB_LOCAL, r.size)
		ref.name = r.name
		ref.hash, _ = hashCString(s.strtab[r.name:], t.seed)
		t.refs = append(t.refs, ref)
	}
	return n
}

// hasGoRuntime reports whether the symbols list the Go runtime's
// functions, i.e. a Go program was not built with -s.
func (t *Funcs) hasGoRuntime() bool {
	for _, r := range t.refs {
		if n := t.nameOf(r); strings.HasPrefix(n, "runtime.") && (n == "runtime.main" || n == "runtime.goexit") {
			return true
		}
	}
	return false
}

// addGo adds the functions of gt, the table in .gopclntab at file
// offset off; a table that cannot be used is a FormatError there.
func (t *Funcs) addGo(gt *GoTable, off uint64) error {
	if len(gt.Funcs) > refIndex {
		return errorf(off, ".gopclntab: %d functions, more than the %d an index holds", len(gt.Funcs), refIndex)
	}
	t.Go = gt
	outside := 0
	for i, g := range gt.Funcs {
		if _, ok := t.loads.CodeOffset(g.Entry); !ok {
			outside++
			continue
		}
		ref := mkRef(g.Entry, SourcePCLNTab, i, true, g.End-g.Entry)
		ref.hash = hashString(g.Name, t.seed)
		t.refs = append(t.refs, ref)
	}
	if outside > 0 && outside == len(gt.Funcs) {
		return errorf(off, ".gopclntab: none of the %d functions lies in an executable segment (text start %#x wrong?)", outside, gt.TextStart)
	}
	t.Skipped += outside
	return nil
}

// sort orders the functions by address, then by source and entry index
// (no name is read to sort), and folds each (name,
// address) listed twice into its first entry: a .symtab entry takes the
// version and (larger) size of its .dynsym twin.
func (t *Funcs) sort() {
	if len(t.refs) == 0 {
		return
	}
	sortByAddr(t.refs)
	out := t.refs[:0]
	for i := 0; i < len(t.refs); {
		j := i + 1
		for j < len(t.refs) && t.refs[j].addr == t.refs[i].addr {
			j++
		}
		// Within one address, an entry whose name hash equals a kept
		// entry's is that entry's twin. With a random seed per Funcs two
		// different names collide by accident with odds of about 2^-64;
		// a file crafted to make them collide can only hide one of its
		// own functions behind another at the same address. A hostile
		// file with every symbol at one address is indexed by hash
		// rather than compared pairwise.
		start := len(out)
		var seen map[uint64]int
		if j-i > maxLinearGroup {
			seen = make(map[uint64]int, j-i)
		}
		for _, r := range t.refs[i:j] {
			k := -1
			if seen != nil {
				if v, ok := seen[r.hash]; ok {
					k = v
				}
			} else {
				for m := start; m < len(out); m++ {
					if out[m].hash == r.hash {
						k = m
						break
					}
				}
			}
			if k < 0 {
				if seen != nil {
					seen[r.hash] = len(out)
				}
				out = append(out, r)
				continue
			}
			if kept := &out[k]; r.src() == SourceDynsym && kept.src() == SourceSymtab && kept.dyn == 0 {
				kept.dyn = uint32(r.idx()) + 1
				if kept.size != sizeInTable && (r.size == sizeInTable || r.size > kept.size) {
					kept.size = r.size
				}
			}
		}
		i = j
	}
	clear(t.refs[len(out):])
	t.refs = slices.Clip(out)
}

// maxLinearGroup is the most functions at one address whose names are
// compared pairwise when folding duplicates; real files have up to a few
// hundred aliases at one address (identical code folding in Node).
const maxLinearGroup = 64

// Len is the number of functions.
func (t *Funcs) Len() int { return len(t.refs) }

// Address returns the address of function i (in address order).
func (t *Funcs) Address(i int) uint64 { return t.refs[i].addr }

// Name returns the name of function i without copying it.
func (t *Funcs) Name(i int) string { return t.nameOf(t.refs[i]) }

func (t *Funcs) nameOf(r funcRef) string {
	switch r.src() {
	case SourceSymtab:
		return cstring0(t.Symtab.strtab, r.name)
	case SourceDynsym:
		return cstring0(t.Dynsym.strtab, r.name)
	}
	return t.Go.Funcs[r.idx()].Name
}

// nameHasPrefix reports whether r's name starts with p, reading no more
// of it than p's length.
func (t *Funcs) nameHasPrefix(r funcRef, p string) bool {
	var tab []byte
	switch r.src() {
	case SourceSymtab:
		tab = t.Symtab.strtab
	case SourceDynsym:
		tab = t.Dynsym.strtab
	default:
		return strings.HasPrefix(t.Go.Funcs[r.idx()].Name, p)
	}
	// Bytes past the name's NUL may match a p holding a NUL: the full
	// check that follows rejects such a name.
	end := uint64(r.name) + uint64(len(p))
	return end <= uint64(len(tab)) && string(tab[r.name:end]) == p
}

// Func decodes function i.
func (t *Funcs) Func(i int) Func {
	r := t.refs[i]
	fn := Func{Name: t.nameOf(r), Address: r.addr, Size: t.size(r), Global: r.global(), Source: r.src()}
	switch {
	case r.src() == SourceDynsym:
		fn.Version, fn.VersionHidden = t.Dynsym.version(r.idx())
	case r.dyn != 0:
		fn.Version, fn.VersionHidden = t.Dynsym.version(int(r.dyn - 1))
	}
	fn.Offset, _ = t.loads.CodeOffset(r.addr)
	return fn
}

// size is Func(i).Size without decoding the rest.
func (t *Funcs) size(r funcRef) uint64 {
	if r.size != sizeInTable {
		return uint64(r.size)
	}
	switch r.src() {
	case SourceSymtab:
		sz := t.Symtab.rawAt(r.idx()).size
		if r.dyn != 0 {
			sz = max(sz, t.Dynsym.rawAt(int(r.dyn-1)).size)
		}
		return sz
	case SourceDynsym:
		return t.Dynsym.rawAt(r.idx()).size
	}
	g := t.Go.Funcs[r.idx()]
	return g.End - g.Entry
}

// Lookup calls yield with each function named name (without version), in
// address order, until yield returns false.
func (t *Funcs) Lookup(name string, yield func(i int) bool) {
	h := hashString(name, t.seed)
	t.byName().lookup(h, func(i int) bool { return t.refs[i].hash == h && t.Name(i) == name }, yield)
}

// Match calls yield with each function whose name matches pattern (see
// package glob), in address order, until yield returns false. A pattern
// with '@' is matched against name@VERSION / name@@VERSION; "" matches
// every function. Names that do not start with the pattern's literal head
// are rejected without running the matcher; "" and "*" read no name.
func (t *Funcs) Match(pattern string, yield func(i int) bool) {
	if pattern == "" || pattern == "*" {
		for i := range t.refs {
			if !yield(i) {
				return
			}
		}
		return
	}
	prefix := glob.Prefix(pattern)
	versioned := strings.Contains(pattern, "@")
	// With a version in the pattern, the name part of the head: the name
	// must equal it when the head reaches the '@', start with it if not.
	namePrefix, exact := prefix, false
	if at := strings.IndexByte(prefix, '@'); at >= 0 && versioned {
		namePrefix, exact = prefix[:at], true
	}
	var buf []byte
	// The head names no '@' in most patterns: the first bytes of a name
	// then reject it without its length being found.
	head := prefix
	if versioned {
		head = namePrefix
	}
	for i, r := range t.refs {
		if !t.nameHasPrefix(r, head) {
			continue
		}
		name := t.nameOf(r)
		if !strings.HasPrefix(name, prefix) && !(versioned && (name == namePrefix || !exact && strings.HasPrefix(name, namePrefix))) {
			continue
		}
		subject := name
		if versioned {
			if fn := t.Func(i); fn.Version != "" {
				buf = append(append(buf[:0], name...), '@')
				if !fn.VersionHidden {
					buf = append(buf, '@')
				}
				buf = append(buf, fn.Version...)
				subject = unsafe.String(unsafe.SliceData(buf), len(buf))
			}
		}
		if glob.Match(pattern, subject) && !yield(i) {
			return
		}
	}
}

// At returns the function holding addr: the one with the highest address
// at or below addr whose [address, address+size) holds it (a function of
// size 0 holds only its first byte). Of several at that address, a sized
// one wins. ok is false when no function holds addr.
func (t *Funcs) At(addr uint64) (i int, ok bool) {
	// First function above addr; candidates are below it.
	j, _ := slices.BinarySearchFunc(t.refs, addr+1, func(r funcRef, a uint64) int { return cmp.Compare(r.addr, a) })
	if addr == ^uint64(0) {
		j = len(t.refs)
	}
	ends := t.maxEnds()
	best := -1
	for k := j - 1; k >= 0; k-- {
		if ends[k] <= addr {
			break // nothing at or before k reaches addr
		}
		r := t.refs[k]
		if best >= 0 && r.addr != t.refs[best].addr {
			break
		}
		size := t.size(r)
		if addr-r.addr < max(size, 1) {
			if best < 0 || size > 0 && t.size(t.refs[best]) == 0 {
				best = k
			}
		}
	}
	return best, best >= 0
}

// prefixMaxEnds returns, for each function in address order, the highest
// end address of it and every function before it: a backward search for
// the function holding an address stops where that falls below it.
func (t *Funcs) prefixMaxEnds() []uint64 {
	ends := make([]uint64, len(t.refs))
	var m uint64
	for k, r := range t.refs {
		end := r.addr + max(t.size(r), 1)
		if end < r.addr {
			end = ^uint64(0)
		}
		m = max(m, end)
		ends[k] = m
	}
	return ends
}

// sortByAddr sorts refs by address, then by source and entry index (so
// that a .symtab entry precedes its .dynsym twin). collect and addGo
// append in (source, index) order, so the position of an entry is that
// second key: an entry becomes address<<p | position, p the bits of a
// position, and the keys are sorted by a least-significant-digit radix
// sort over the bytes that vary, then the entries are moved to their
// places in place. For Node's 150k functions this takes a few
// milliseconds where a comparison sort takes 25, and it costs 16 bytes
// per entry, not another copy of the index. Addresses too large to share
// a key with a position (no real user-space binary's) fall back to an
// in-place radix sort of the entries themselves.
func sortByAddr(refs []funcRef) {
	if len(refs) < 2 {
		return
	}
	or, and := uint64(0), ^uint64(0)
	for _, r := range refs {
		or |= r.addr
		and &= r.addr
	}
	posBits := bits.Len(uint(len(refs)))
	if or>>(64-posBits) != 0 {
		if varying := or ^ and; varying == 0 {
			sortByRef(refs)
		} else {
			radixPass(refs, (63-bits.LeadingZeros64(varying))&^7)
		}
		return
	}
	keys := make([]uint64, len(refs))
	var counts [8][256]int
	for i, r := range refs {
		k := r.addr<<posBits | uint64(i)
		keys[i] = k
		for d := posBits / 8; d < 8; d++ {
			counts[d][byte(k>>(8*d))]++
		}
	}
	// Bytes below posBits/8 hold only position bits, in which the keys
	// are already in order.
	var tmp []uint64
	src := keys
	for d := posBits / 8; d < 8; d++ {
		c := &counts[d]
		if c[byte(src[0]>>(8*d))] == len(src) {
			continue // the same byte in every key
		}
		if tmp == nil {
			tmp = make([]uint64, len(keys))
		}
		pos := 0
		for b := range c {
			n := c[b]
			c[b] = pos
			pos += n
		}
		dst := tmp
		if &dst[0] == &src[0] {
			dst = keys
		}
		for _, k := range src {
			b := byte(k >> (8 * d))
			dst[c[b]] = k
			c[b]++
		}
		src = dst
	}
	// src[i]'s position bits name the entry that belongs at i: follow
	// each cycle of that permutation once, marking the keys done.
	mask := uint64(1)<<posBits - 1
	const done = 1 << 63 // above every position; addresses are no longer needed
	for i := range src {
		if src[i]&done != 0 {
			continue
		}
		first := refs[i]
		j := i
		for {
			k := int(src[j] & mask)
			src[j] = done
			if k == i {
				refs[j] = first
				break
			}
			refs[j] = refs[k]
			j = k
		}
	}
}

// radixPass distributes refs into 256 buckets by the address byte at
// shift (American flag sort: each entry is swapped into its bucket's next
// slot), then sorts each bucket by the next byte down. Entries at one
// address keep no order here; sortByRef restores it.
func radixPass(refs []funcRef, shift int) {
	if len(refs) <= smallSort {
		insertionSort(refs)
		return
	}
	var count, next, end [256]int
	for _, r := range refs {
		count[byte(r.addr>>shift)]++
	}
	pos := 0
	for b := range 256 {
		next[b] = pos
		pos += count[b]
		end[b] = pos
	}
	for b := range 256 {
		for next[b] < end[b] {
			r := refs[next[b]]
			for d := byte(r.addr >> shift); int(d) != b; d = byte(r.addr >> shift) {
				r, refs[next[d]] = refs[next[d]], r
				next[d]++
			}
			refs[next[b]] = r
			next[b]++
		}
	}
	start := 0
	for b := range 256 {
		bucket := refs[start:end[b]]
		start = end[b]
		switch {
		case len(bucket) < 2:
		case shift == 0:
			sortByRef(bucket) // one address
		default:
			radixPass(bucket, shift-8)
		}
	}
}

// smallSort is the bucket size below which insertion sort beats another
// radix pass.
const smallSort = 32

func insertionSort(refs []funcRef) {
	for i := 1; i < len(refs); i++ {
		for j := i; j > 0 && refLess(refs[j], refs[j-1]); j-- {
			refs[j], refs[j-1] = refs[j-1], refs[j]
		}
	}
}

func refLess(a, b funcRef) bool {
	return a.addr < b.addr || a.addr == b.addr && a.ref&^refGlobal < b.ref&^refGlobal
}

// sortByRef orders entries of one address by source and index.
func sortByRef(refs []funcRef) {
	if len(refs) <= smallSort {
		insertionSort(refs)
		return
	}
	slices.SortFunc(refs, func(a, b funcRef) int { return cmp.Compare(a.ref&^refGlobal, b.ref&^refGlobal) })
}
