package safeelf

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"sync/atomic"
)

// Ceilings. Each bounds what one hostile header field can make us read or
// keep; real files stay far below them.
const (
	// maxSections bounds the section header count, including the
	// extended count of e_shnum = 0 (gABI "Extended Section Numbering").
	// Executables and libraries have tens of sections; objects built with
	// -ffunction-sections reach tens of thousands.
	maxSections = 1 << 18
	// maxProgs bounds the program header count. e_phnum is 16 bits, and
	// PN_XNUM moves a larger count to section 0's sh_info; real files have
	// fewer than twenty.
	maxProgs = 1 << 16
	// maxSectionNames bounds .shstrtab: libjvm.so's is under 400 bytes,
	// a large C++ object's a few MiB.
	maxSectionNames = 16 << 20
	// readChunk is the most memory a read commits before the file has
	// shown that it holds the bytes: a header claiming a 4 GiB section in
	// a 4 KiB file costs one chunk, not 4 GiB.
	readChunk = 1 << 20
)

// FormatError is a corrupt or hostile ELF file: what was wrong, and the
// file offset where it was found.
type FormatError struct {
	// Off is the file offset of the offending structure.
	Off int64
	// Msg says which invariant failed.
	Msg string
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("malformed ELF at offset %#x: %s", e.Off, e.Msg)
}

func errorf(off uint64, format string, args ...any) error {
	return &FormatError{Off: int64(off), Msg: fmt.Sprintf(format, args...)}
}

// Prog is one program header.
type Prog struct {
	Type   elf.ProgType
	Flags  elf.ProgFlag
	Off    uint64
	Vaddr  uint64
	Filesz uint64
	Memsz  uint64
	Align  uint64
}

// Section is one section header with its name.
type Section struct {
	Name      string
	Type      elf.SectionType
	Flags     elf.SectionFlag
	Addr      uint64
	Offset    uint64
	Size      uint64
	Link      uint32
	Info      uint32
	Addralign uint64
	Entsize   uint64
	// Index is the section's index in the section header table.
	Index int
	// HeaderOff is the file offset of the section's header, where
	// errors about its fields are located.
	HeaderOff uint64
}

// File is the checked header of an ELF file.
type File struct {
	Class     elf.Class
	Data      elf.Data
	ByteOrder binary.ByteOrder
	Type      elf.Type
	Machine   elf.Machine
	Progs     []Prog
	// Sections is empty for a file without section headers (stripped of
	// them, as sstrip does); notes are then found through PT_NOTE.
	Sections []Section

	r    io.ReaderAt
	size int64 // -1 when the reader does not tell
	// inflated is what compressed sections took of the file's
	// decompression budget (compress.go).
	inflated atomic.Uint64
}

// sizer is implemented by bytes.Reader, strings.Reader and
// io.SectionReader.
type sizer interface{ Size() int64 }

// NewFile reads and checks the ELF header, program headers and section
// headers of r.
func NewFile(r io.ReaderAt) (*File, error) {
	f := &File{r: r, size: -1}
	switch s := r.(type) {
	case sizer:
		f.size = s.Size()
	case *os.File:
		if st, err := s.Stat(); err == nil && st.Mode().IsRegular() {
			f.size = st.Size()
		}
	}
	if err := f.readHeader(); err != nil {
		return nil, err
	}
	return f, nil
}

// ReadAt returns n bytes at off. It fails with a FormatError when the
// range is not in the file or exceeds limit; it never allocates more than
// readChunk beyond the bytes the file actually delivered.
func (f *File) ReadAt(off, n, limit uint64) ([]byte, error) {
	if n > limit {
		return nil, errorf(off, "%d bytes requested, more than the %d allowed", n, limit)
	}
	end := off + n
	if end < off || (f.size >= 0 && end > uint64(f.size)) {
		return nil, errorf(off, "%d bytes at offset %#x lie beyond the end of the file", n, off)
	}
	if off > 1<<62 {
		return nil, errorf(off, "offset %#x out of range", off)
	}
	if f.size >= 0 || n <= readChunk {
		buf := make([]byte, n)
		if _, err := f.r.ReadAt(buf, int64(off)); err != nil && !(err == io.EOF && n == 0) {
			return nil, f.readErr(off, n, err)
		}
		return buf, nil
	}
	// Unknown size: grow with what the file delivers.
	var buf []byte
	for got := uint64(0); got < n; {
		c := min(n-got, readChunk)
		buf = append(buf, make([]byte, c)...)
		if _, err := f.r.ReadAt(buf[got:got+c], int64(off+got)); err != nil {
			return nil, f.readErr(off, n, err)
		}
		got += c
	}
	return buf, nil
}

// ReadFull reads len(buf) bytes at off into buf, with ReadAt's range
// checks and no allocation.
func (f *File) ReadFull(buf []byte, off uint64) error {
	n := uint64(len(buf))
	if end := off + n; end < off || off > 1<<62 || (f.size >= 0 && end > uint64(f.size)) {
		return errorf(off, "%d bytes at offset %#x lie beyond the end of the file", n, off)
	}
	if _, err := f.r.ReadAt(buf, int64(off)); err != nil && !(err == io.EOF && n == 0) {
		return f.readErr(off, n, err)
	}
	return nil
}

func (f *File) readErr(off, n uint64, err error) error {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return errorf(off, "%d bytes at offset %#x lie beyond the end of the file", n, off)
	}
	return fmt.Errorf("read %d bytes at offset %#x: %w", n, off, err)
}

// Section returns the first section named name, or nil.
func (f *File) Section(name string) *Section {
	for i := range f.Sections {
		if f.Sections[i].Name == name {
			return &f.Sections[i]
		}
	}
	return nil
}

// Header layouts: gABI "ELF Header", "Program Header", "Sections".
const (
	ehdr32Size = 52
	ehdr64Size = 64
	phdr32Size = 32
	phdr64Size = 56
	shdr32Size = 40
	shdr64Size = 64
)

func (f *File) readHeader() error {
	ident := make([]byte, elf.EI_NIDENT)
	n, err := f.r.ReadAt(ident, 0)
	if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
		return err
	}
	if n < 4 || string(ident[:4]) != elf.ELFMAG {
		return errorf(0, "bad magic %q: not an ELF file", ident[:min(n, 4)])
	}
	if n < elf.EI_NIDENT {
		return errorf(0, "file too short for an ELF header")
	}
	f.Class = elf.Class(ident[elf.EI_CLASS])
	f.Data = elf.Data(ident[elf.EI_DATA])
	switch f.Data {
	case elf.ELFDATA2LSB:
		f.ByteOrder = binary.LittleEndian
	case elf.ELFDATA2MSB:
		f.ByteOrder = binary.BigEndian
	default:
		return errorf(elf.EI_DATA, "unknown data encoding %d", ident[elf.EI_DATA])
	}
	var hsize uint64
	switch f.Class {
	case elf.ELFCLASS32:
		hsize = ehdr32Size
	case elf.ELFCLASS64:
		hsize = ehdr64Size
	default:
		return errorf(elf.EI_CLASS, "unknown class %d", ident[elf.EI_CLASS])
	}
	h, err := f.ReadAt(0, hsize, hsize)
	if err != nil {
		return err
	}
	bo := f.ByteOrder
	f.Type = elf.Type(bo.Uint16(h[16:]))
	f.Machine = elf.Machine(bo.Uint16(h[18:]))
	var phoff, shoff uint64
	var phentsize, phnum, shentsize, shnum, shstrndx uint64
	if f.Class == elf.ELFCLASS64 {
		phoff, shoff = bo.Uint64(h[32:]), bo.Uint64(h[40:])
		phentsize, phnum = uint64(bo.Uint16(h[54:])), uint64(bo.Uint16(h[56:]))
		shentsize, shnum, shstrndx = uint64(bo.Uint16(h[58:])), uint64(bo.Uint16(h[60:])), uint64(bo.Uint16(h[62:]))
	} else {
		phoff, shoff = uint64(bo.Uint32(h[28:])), uint64(bo.Uint32(h[32:]))
		phentsize, phnum = uint64(bo.Uint16(h[42:])), uint64(bo.Uint16(h[44:]))
		shentsize, shnum, shstrndx = uint64(bo.Uint16(h[46:])), uint64(bo.Uint16(h[48:])), uint64(bo.Uint16(h[50:]))
	}

	// Section 0 carries the extended counts when the header fields
	// overflow (gABI "Extended Section Numbering"; PN_XNUM for phnum).
	if shoff != 0 {
		want := uint64(shdr64Size)
		if f.Class == elf.ELFCLASS32 {
			want = shdr32Size
		}
		if shentsize != want {
			return errorf(shoff, "section header size %d, want %d", shentsize, want)
		}
		s0, err := f.ReadAt(shoff, shentsize, shentsize)
		if err != nil {
			return err
		}
		first := f.section(s0)
		if shnum == 0 {
			shnum = first.Size
		}
		if shstrndx == uint64(elf.SHN_XINDEX) {
			shstrndx = uint64(first.Link)
		}
		if phnum == 0xffff { // PN_XNUM
			phnum = uint64(first.Info)
		}
	} else {
		shnum = 0
	}

	if phnum > 0 {
		want := uint64(phdr64Size)
		if f.Class == elf.ELFCLASS32 {
			want = phdr32Size
		}
		if phentsize != want {
			return errorf(phoff, "program header size %d, want %d", phentsize, want)
		}
		if phnum > maxProgs {
			return errorf(phoff, "%d program headers, more than the %d allowed", phnum, maxProgs)
		}
		raw, err := f.ReadAt(phoff, phnum*phentsize, maxProgs*phdr64Size)
		if err != nil {
			return err
		}
		f.Progs = make([]Prog, phnum)
		for i := range f.Progs {
			f.Progs[i] = f.prog(raw[uint64(i)*phentsize:])
		}
	}

	if shnum > 0 {
		if shnum > maxSections {
			return errorf(shoff, "%d section headers, more than the %d allowed", shnum, maxSections)
		}
		raw, err := f.ReadAt(shoff, shnum*shentsize, maxSections*shdr64Size)
		if err != nil {
			return err
		}
		secs := make([]rawSection, shnum)
		for i := range secs {
			secs[i] = f.section(raw[uint64(i)*shentsize:])
			secs[i].Index = i
			secs[i].HeaderOff = shoff + uint64(i)*shentsize
		}
		var names []byte
		if shstrndx != 0 && shstrndx < shnum {
			st := secs[shstrndx]
			if st.Type != elf.SHT_STRTAB {
				return errorf(shoff+shstrndx*shentsize, "section name table (section %d) has type %v", shstrndx, st.Type)
			}
			if names, err = f.ReadAt(st.Offset, st.Size, maxSectionNames); err != nil {
				return err
			}
		} else if shstrndx != 0 {
			return errorf(shoff, "section name table index %d out of range [0,%d)", shstrndx, shnum)
		}
		f.Sections = make([]Section, shnum)
		for i, s := range secs {
			s.Section.Name = cstring(names, s.name)
			f.Sections[i] = s.Section
		}
	}
	return nil
}

type rawSection struct {
	Section
	name uint32
}

func (f *File) section(b []byte) rawSection {
	bo := f.ByteOrder
	var s rawSection
	if f.Class == elf.ELFCLASS64 {
		s.name = bo.Uint32(b[0:])
		s.Type = elf.SectionType(bo.Uint32(b[4:]))
		s.Flags = elf.SectionFlag(bo.Uint64(b[8:]))
		s.Addr = bo.Uint64(b[16:])
		s.Offset = bo.Uint64(b[24:])
		s.Size = bo.Uint64(b[32:])
		s.Link = bo.Uint32(b[40:])
		s.Info = bo.Uint32(b[44:])
		s.Addralign = bo.Uint64(b[48:])
		s.Entsize = bo.Uint64(b[56:])
	} else {
		s.name = bo.Uint32(b[0:])
		s.Type = elf.SectionType(bo.Uint32(b[4:]))
		s.Flags = elf.SectionFlag(bo.Uint32(b[8:]))
		s.Addr = uint64(bo.Uint32(b[12:]))
		s.Offset = uint64(bo.Uint32(b[16:]))
		s.Size = uint64(bo.Uint32(b[20:]))
		s.Link = bo.Uint32(b[24:])
		s.Info = bo.Uint32(b[28:])
		s.Addralign = uint64(bo.Uint32(b[32:]))
		s.Entsize = uint64(bo.Uint32(b[36:]))
	}
	return s
}

func (f *File) prog(b []byte) Prog {
	bo := f.ByteOrder
	var p Prog
	p.Type = elf.ProgType(bo.Uint32(b[0:]))
	if f.Class == elf.ELFCLASS64 {
		p.Flags = elf.ProgFlag(bo.Uint32(b[4:]))
		p.Off = bo.Uint64(b[8:])
		p.Vaddr = bo.Uint64(b[16:])
		p.Filesz = bo.Uint64(b[32:])
		p.Memsz = bo.Uint64(b[40:])
		p.Align = bo.Uint64(b[48:])
	} else {
		p.Off = uint64(bo.Uint32(b[4:]))
		p.Vaddr = uint64(bo.Uint32(b[8:]))
		p.Filesz = uint64(bo.Uint32(b[16:]))
		p.Memsz = uint64(bo.Uint32(b[20:]))
		p.Flags = elf.ProgFlag(bo.Uint32(b[24:]))
		p.Align = uint64(bo.Uint32(b[28:]))
	}
	return p
}

// cstring returns the NUL-terminated string at off in tab, "" when off is
// out of range; an unterminated name ends at the table's end.
func cstring(tab []byte, off uint32) string {
	if uint64(off) >= uint64(len(tab)) {
		return ""
	}
	b := tab[off:]
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
