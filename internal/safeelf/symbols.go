package safeelf

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"hash/maphash"
	"sync"
	"unsafe"
)

// Ceilings of the symbol reader. Reads are bounded by the file as well
// (File.ReadAt): these catch headers that claim more than any real file
// holds.
const (
	// maxSymbols bounds one symbol table: 16 Mi entries (384 MiB of
	// ELF64 entries). Node's .symtab has 107k, libjvm.so's about 90k,
	// Chromium built with symbols a few million.
	maxSymbols = 1 << 24
	// maxStringTable bounds a symbol string table. st_name is 32 bits, so
	// nothing beyond 4 GiB can be named; Node's .strtab is 7.5 MiB.
	maxStringTable = 1 << 30
)

// ErrNoSymbols indicates the file has no such symbol table (.symtab removed by
// strip, .dynsym absent from a static executable, no .gopclntab).
var ErrNoSymbols = errors.New("no symbol section")

// Symbols is one symbol table, .symtab or .dynsym, read once as bytes
// together with its string table. Nothing is decoded when it is opened
// but what validation needs; a name stays in the string table until it
// is asked for and is then a string over those bytes, never a copy.
// Entry 0 is the null symbol, as in the file (and in readelf's Num
// column). Symbols is immutable and safe for concurrent use.
type Symbols struct {
	// Section is the symbol table's section header.
	Section Section

	le      bool // little-endian
	is64    bool
	entSize uint64
	n       int
	raw     []byte // the entries
	strtab  []byte // never written after the read: names point into it
	vers    *versionTable

	seed   maphash.Seed
	byName func() *nameIndex // built on the first Lookup
}

// Symbol is one decoded entry. Name and Version share the bytes of the
// string table.
type Symbol struct {
	Name    string
	Value   uint64
	Size    uint64
	Type    elf.SymType
	Bind    elf.SymBind
	Other   uint8 // st_other; its low two bits are the visibility
	Section elf.SectionIndex
	// Version is the GNU symbol version of a .dynsym entry, "" for none
	// (or for the base version, index 1).
	Version string
	// VersionHidden is true for name@VERSION (only a reference naming
	// the version binds to it), false for name@@VERSION, the default a
	// new link binds to.
	VersionHidden bool
	// VersionIndex is the raw .gnu.version entry, hidden bit included.
	VersionIndex elf.VersionIndex
	// Library is the object a needed version comes from
	// (.gnu.version_r); "" for a version this file defines.
	Library string
}

// Symbols reads the .symtab of f (the first SHT_SYMTAB section). It
// fails with ErrNoSymbols when the file has none.
func (f *File) Symbols() (*Symbols, error) { return f.symbols(elf.SHT_SYMTAB) }

// DynamicSymbols reads the .dynsym of f (the first SHT_DYNSYM section)
// with its GNU versions (.gnu.version, .gnu.version_d, .gnu.version_r).
// It fails with ErrNoSymbols when the file has none.
func (f *File) DynamicSymbols() (*Symbols, error) { return f.symbols(elf.SHT_DYNSYM) }

// SectionByType returns the first section of type t, or nil.
func (f *File) SectionByType(t elf.SectionType) *Section {
	for i := range f.Sections {
		if f.Sections[i].Type == t {
			return &f.Sections[i]
		}
	}
	return nil
}

func (f *File) symbols(typ elf.SectionType) (*Symbols, error) {
	sec := f.SectionByType(typ)
	if sec == nil {
		return nil, ErrNoSymbols
	}
	t := &Symbols{Section: *sec, le: f.Data == elf.ELFDATA2LSB, is64: f.Class == elf.ELFCLASS64, seed: maphash.MakeSeed()}
	t.entSize = uint64(elf.Sym32Size)
	if t.is64 {
		t.entSize = elf.Sym64Size
	}
	if sec.Entsize != 0 && sec.Entsize != t.entSize {
		return nil, errorf(sec.HeaderOff, "%s: entry size %d, want %d", sec.Name, sec.Entsize, t.entSize)
	}
	if sec.Size%t.entSize != 0 {
		return nil, errorf(sec.HeaderOff, "%s: size %d is not a multiple of the entry size %d", sec.Name, sec.Size, t.entSize)
	}
	if sec.Size/t.entSize > maxSymbols {
		return nil, errorf(sec.HeaderOff, "%s: %d symbols, more than the %d allowed", sec.Name, sec.Size/t.entSize, maxSymbols)
	}
	strtab, err := f.stringTable(sec, sec.Link)
	if err != nil {
		return nil, err
	}
	raw, err := f.ReadAt(sec.Offset, sec.Size, maxSymbols*elf.Sym64Size)
	if err != nil {
		return nil, err
	}
	t.raw, t.strtab, t.n = raw, strtab, int(sec.Size/t.entSize)
	// Every name must lie in the string table: checked once here so
	// that Name never fails.
	for i := 1; i < t.n; i++ {
		if off := t.u32(t.entry(i)); uint64(off) >= uint64(len(strtab)) && off != 0 {
			return nil, errorf(sec.Offset+uint64(i)*t.entSize, "%s: symbol %d: name offset %#x lies past the %d-byte string table", sec.Name, i, off, len(strtab))
		}
	}
	if typ == elf.SHT_DYNSYM {
		if t.vers, err = f.readVersions(t); err != nil {
			return nil, err
		}
	}
	t.byName = sync.OnceValue(func() *nameIndex {
		return newNameIndex(t.n, func(i int) (uint64, bool) {
			name := t.Name(i)
			return maphash.String(t.seed, name), name != ""
		})
	})
	return t, nil
}

// stringTable reads the string table at section index link, as the
// section of header from links to it. A string table must end with a
// NUL (gABI, "String Table"), so that every name in it is terminated.
func (f *File) stringTable(from *Section, link uint32) ([]byte, error) {
	if link == 0 || uint64(link) >= uint64(len(f.Sections)) {
		return nil, errorf(from.HeaderOff, "%s: string table index %d out of range [1,%d)", from.Name, link, len(f.Sections))
	}
	s := &f.Sections[link]
	if s.Type != elf.SHT_STRTAB {
		return nil, errorf(s.HeaderOff, "%s: linked section %d (%s) has type %v, want SHT_STRTAB", from.Name, link, s.Name, s.Type)
	}
	b, err := f.ReadAt(s.Offset, s.Size, maxStringTable)
	if err != nil {
		return nil, err
	}
	if len(b) > 0 && b[len(b)-1] != 0 {
		return nil, errorf(s.Offset+s.Size-1, "string table %s does not end with a NUL", s.Name)
	}
	return b, nil
}

// Len is the number of entries, the null entry 0 included.
func (t *Symbols) Len() int { return t.n }

func (t *Symbols) entry(i int) []byte {
	off := uint64(i) * t.entSize
	return t.raw[off : off+t.entSize]
}

func (t *Symbols) u16(b []byte) uint16 {
	if t.le {
		return binary.LittleEndian.Uint16(b)
	}
	return binary.BigEndian.Uint16(b)
}

func (t *Symbols) u32(b []byte) uint32 {
	if t.le {
		return binary.LittleEndian.Uint32(b)
	}
	return binary.BigEndian.Uint32(b)
}

func (t *Symbols) u64(b []byte) uint64 {
	if t.le {
		return binary.LittleEndian.Uint64(b)
	}
	return binary.BigEndian.Uint64(b)
}

// rawSym is what the function index needs of an entry, without its name.
type rawSym struct {
	name  uint32
	info  uint8
	shndx uint16
	value uint64
	size  uint64
}

// Layouts: gABI "Symbol Table", Elf32_Sym and Elf64_Sym.
func (t *Symbols) rawAt(i int) rawSym {
	e := t.entry(i)
	if t.is64 {
		return rawSym{name: t.u32(e), info: e[4], shndx: t.u16(e[6:]), value: t.u64(e[8:]), size: t.u64(e[16:])}
	}
	return rawSym{name: t.u32(e), value: uint64(t.u32(e[4:])), size: uint64(t.u32(e[8:])), info: e[12], shndx: t.u16(e[14:])}
}

func (t *Symbols) other(i int) uint8 {
	if t.is64 {
		return t.entry(i)[5]
	}
	return t.entry(i)[13]
}

// Name returns the name of entry i without copying it.
func (t *Symbols) Name(i int) string { return cstring0(t.strtab, t.u32(t.entry(i))) }

// Value returns st_value of entry i.
func (t *Symbols) Value(i int) uint64 { return t.rawAt(i).value }

// Symbol decodes entry i.
func (t *Symbols) Symbol(i int) Symbol {
	r := t.rawAt(i)
	s := Symbol{
		Name: cstring0(t.strtab, r.name), Value: r.value, Size: r.size,
		Type: elf.ST_TYPE(r.info), Bind: elf.ST_BIND(r.info), Other: t.other(i),
		Section: elf.SectionIndex(r.shndx),
	}
	if t.vers != nil {
		s.VersionIndex = t.vers.index(i)
		if v := t.vers.lookup(s.VersionIndex); v != nil {
			s.Version, s.Library = v.name, v.library
			s.VersionHidden = s.VersionIndex.IsHidden()
		}
	}
	return s
}

// version returns the version of entry i, "" for none.
func (t *Symbols) version(i int) (name string, hidden bool) {
	if t.vers == nil {
		return "", false
	}
	vi := t.vers.index(i)
	if v := t.vers.lookup(vi); v != nil {
		return v.name, vi.IsHidden()
	}
	return "", false
}

// Lookup calls yield with the index of every entry named name, in table
// order, until yield returns false. The first call builds a hash index
// of the names (no string is copied).
func (t *Symbols) Lookup(name string, yield func(i int) bool) {
	if name == "" {
		return
	}
	t.byName().lookup(maphash.String(t.seed, name), func(i int) bool { return t.Name(i) == name }, yield)
}

// cstring0 returns the NUL-terminated string at off in tab as a string
// sharing tab's bytes, "" when off is out of range. tab must never be
// written afterwards.
func cstring0(tab []byte, off uint32) string {
	if uint64(off) >= uint64(len(tab)) {
		return ""
	}
	b := tab[off:]
	n := bytes.IndexByte(b, 0)
	if n < 0 {
		n = len(b)
	}
	if n == 0 {
		return ""
	}
	return unsafe.String(&b[0], n)
}
