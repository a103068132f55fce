package usdt

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/probekit/probekit/internal/test/testkit"
)

// testNote is one note for the writers below.
type testNote struct {
	owner                     string
	typ                       uint32
	location, base, semaphore uint64
	provider, name, args      string
	// desc, when set, replaces the encoded stapsdt desc.
	desc []byte
}

// order is a byte order that can also append.
type order interface {
	binary.ByteOrder
	binary.AppendByteOrder
}

// encodeNotes lays notes out as a note section: 4-byte padding, fields
// in bo, addresses of the class's size.
func encodeNotes(class elf.Class, bo order, notes []testNote) []byte {
	var out []byte
	for _, n := range notes {
		owner := n.owner
		if owner == "" {
			owner = "stapsdt"
		}
		typ := n.typ
		if typ == 0 {
			typ = ntStapsdt
		}
		desc := n.desc
		if desc == nil {
			for _, a := range []uint64{n.location, n.base, n.semaphore} {
				if class == elf.ELFCLASS32 {
					desc = bo.AppendUint32(desc, uint32(a))
				} else {
					desc = bo.AppendUint64(desc, a)
				}
			}
			desc = append(desc, n.provider+"\x00"+n.name+"\x00"+n.args+"\x00"...)
		}
		name := append([]byte(owner), 0)
		out = bo.AppendUint32(out, uint32(len(name)))
		out = bo.AppendUint32(out, uint32(len(desc)))
		out = bo.AppendUint32(out, typ)
		out = append(out, pad4(name)...)
		out = append(out, pad4(desc)...)
	}
	return out
}

func pad4(b []byte) []byte {
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// testTextAddr is where buildELF places its executable code: every probe
// of a test note should point into [testTextAddr, testTextAddr+len(text)).
const (
	testTextAddr = 0x1000
	testDataAddr = 0x2000
)

// buildELF writes a minimal ELF file: an executable PT_LOAD holding text
// at testTextAddr, a writable PT_LOAD of 16 zero bytes at testDataAddr,
// and sections .text, .data, .note.stapsdt (holding notes, as given) and
// .shstrtab. Only what the note parser reads is filled in.
func buildELF(class elf.Class, bo binary.ByteOrder, machine elf.Machine, text, notes []byte) []byte {
	is64 := class == elf.ELFCLASS64
	ehsize, phsize, shsize := 52, 32, 40
	if is64 {
		ehsize, phsize, shsize = 64, 56, 64
	}
	shstrtab := []byte("\x00.text\x00.data\x00.note.stapsdt\x00.shstrtab\x00")
	textOff := uint64(testTextAddr)
	dataOff := uint64(testDataAddr)
	notesOff := dataOff + 16
	strOff := notesOff + uint64(len(notes))
	shOff := (strOff + uint64(len(shstrtab)) + 7) &^ 7
	size := shOff + 5*uint64(shsize)
	buf := make([]byte, size)
	copy(buf, elf.ELFMAG)
	buf[elf.EI_CLASS] = byte(class)
	if bo == binary.BigEndian {
		buf[elf.EI_DATA] = byte(elf.ELFDATA2MSB)
	} else {
		buf[elf.EI_DATA] = byte(elf.ELFDATA2LSB)
	}
	buf[elf.EI_VERSION] = 1
	bo.PutUint16(buf[16:], uint16(elf.ET_DYN))
	bo.PutUint16(buf[18:], uint16(machine))
	bo.PutUint32(buf[20:], 1)
	put := func(off int, v uint64, wide bool) {
		if wide {
			bo.PutUint64(buf[off:], v)
		} else {
			bo.PutUint32(buf[off:], uint32(v))
		}
	}
	if is64 {
		put(32, uint64(ehsize), true) // e_phoff
		put(40, shOff, true)          // e_shoff
		bo.PutUint16(buf[52:], uint16(ehsize))
		bo.PutUint16(buf[54:], uint16(phsize))
		bo.PutUint16(buf[56:], 2)
		bo.PutUint16(buf[58:], uint16(shsize))
		bo.PutUint16(buf[60:], 5)
		bo.PutUint16(buf[62:], 4)
	} else {
		put(28, uint64(ehsize), false)
		put(32, shOff, false)
		bo.PutUint16(buf[40:], uint16(ehsize))
		bo.PutUint16(buf[42:], uint16(phsize))
		bo.PutUint16(buf[44:], 2)
		bo.PutUint16(buf[46:], uint16(shsize))
		bo.PutUint16(buf[48:], 5)
		bo.PutUint16(buf[50:], 4)
	}
	phdr := func(i int, flags elf.ProgFlag, off, vaddr, filesz uint64) {
		p := ehsize + i*phsize
		bo.PutUint32(buf[p:], uint32(elf.PT_LOAD))
		if is64 {
			bo.PutUint32(buf[p+4:], uint32(flags))
			put(p+8, off, true)
			put(p+16, vaddr, true)
			put(p+24, vaddr, true)
			put(p+32, filesz, true)
			put(p+40, filesz, true)
			put(p+48, 0x1000, true)
		} else {
			put(p+4, off, false)
			put(p+8, vaddr, false)
			put(p+12, vaddr, false)
			put(p+16, filesz, false)
			put(p+20, filesz, false)
			bo.PutUint32(buf[p+24:], uint32(flags))
			put(p+28, 0x1000, false)
		}
	}
	phdr(0, elf.PF_R|elf.PF_X, textOff, testTextAddr, uint64(len(text)))
	phdr(1, elf.PF_R|elf.PF_W, dataOff, testDataAddr, 16)
	copy(buf[textOff:], text)
	copy(buf[notesOff:], notes)
	copy(buf[strOff:], shstrtab)
	shdr := func(i int, name uint32, typ elf.SectionType, flags elf.SectionFlag, addr, off, sz, align uint64) {
		p := int(shOff) + i*shsize
		bo.PutUint32(buf[p:], name)
		bo.PutUint32(buf[p+4:], uint32(typ))
		if is64 {
			put(p+8, uint64(flags), true)
			put(p+16, addr, true)
			put(p+24, off, true)
			put(p+32, sz, true)
			put(p+48, align, true)
		} else {
			put(p+8, uint64(flags), false)
			put(p+12, addr, false)
			put(p+16, off, false)
			put(p+20, sz, false)
			put(p+32, align, false)
		}
	}
	shdr(1, 1, elf.SHT_PROGBITS, elf.SHF_ALLOC|elf.SHF_EXECINSTR, testTextAddr, textOff, uint64(len(text)), 16)
	shdr(2, 7, elf.SHT_PROGBITS, elf.SHF_ALLOC|elf.SHF_WRITE, testDataAddr, dataOff, 16, 8)
	shdr(3, 13, elf.SHT_NOTE, 0, 0, notesOff, uint64(len(notes)), 4)
	shdr(4, 27, elf.SHT_STRTAB, 0, 0, strOff, uint64(len(shstrtab)), 1)
	return buf
}

var nops16 = bytes.Repeat([]byte{0x90}, 16)

func TestNotesAllClassesAndOrders(t *testing.T) {
	for _, c := range []struct {
		class elf.Class
		bo    order
		m     elf.Machine
		nop   []byte
	}{
		{elf.ELFCLASS64, binary.LittleEndian, elf.EM_X86_64, nops16},
		{elf.ELFCLASS32, binary.LittleEndian, elf.EM_386, nops16},
		{elf.ELFCLASS64, binary.BigEndian, elf.EM_S390, bytes.Repeat([]byte{0x07, 0x00}, 8)},
		{elf.ELFCLASS64, binary.BigEndian, elf.EM_PPC64, bytes.Repeat([]byte{0x60, 0, 0, 0}, 4)},
		{elf.ELFCLASS32, binary.LittleEndian, elf.EM_ARM, bytes.Repeat([]byte{0x00, 0xbf}, 8)},
		{elf.ELFCLASS32, binary.BigEndian, elf.EM_PPC, bytes.Repeat([]byte{0x60, 0, 0, 0}, 4)},
	} {
		t.Run(c.m.String()+"/"+c.bo.String(), func(t *testing.T) {
			notes := encodeNotes(c.class, c.bo, []testNote{
				{owner: "GNU", typ: 3, desc: []byte("abcdefgh")}, // another owner, same type: skipped
				{location: testTextAddr + 4, base: 0, semaphore: testDataAddr + 2, provider: "prov", name: "a", args: ""},
				{typ: 4, location: 1, provider: "x", name: "y"}, // another type: skipped
				{location: testTextAddr + 8, provider: "prov", name: "b", args: ":"},
				{location: testTextAddr + 12, semaphore: testDataAddr + 4, provider: "prov", name: "a", args: "garbage@@"},
			})
			f, err := Parse(bytes.NewReader(buildELF(c.class, c.bo, c.m, c.nop, notes)))
			if err != nil {
				t.Fatal(err)
			}
			if f.Class != c.class || f.ByteOrder != c.bo || f.Machine != c.m {
				t.Errorf("file %v %v %v", f.Class, f.ByteOrder, f.Machine)
			}
			if len(f.Probes) != 2 || f.Probes[0].String() != "prov:a" || f.Probes[1].String() != "prov:b" {
				t.Fatalf("probes %+v", f.Probes)
			}
			a := f.Probes[0].Locations
			if len(a) != 2 {
				t.Fatalf("prov:a has %d locations", len(a))
			}
			want := Location{Address: testTextAddr + 4, FileOffset: testTextAddr + 4, Semaphore: testDataAddr + 2, SemaphoreOffset: testDataAddr + 2, Site: SiteNop}
			if got := a[0]; got.Address != want.Address || got.FileOffset != want.FileOffset || got.Semaphore != want.Semaphore ||
				got.SemaphoreOffset != want.SemaphoreOffset || got.Site != SiteNop || got.SiteErr != nil || got.Args != nil || got.ArgsErr != nil {
				t.Errorf("prov:a[0] = %+v", got)
			}
			if a[1].ArgsSpec != "garbage@@" || a[1].ArgsErr == nil || a[1].Args != nil {
				t.Errorf("bad args kept? %+v", a[1])
			}
			if a[1].SiteErr != nil || a[1].Address != testTextAddr+12 {
				t.Errorf("a location with bad args must still resolve: %+v", a[1])
			}
			if b := f.Probes[1].Locations[0]; b.ArgsSpec != ":" || b.Args != nil || b.ArgsErr != nil {
				t.Errorf("':' args = no arguments: %+v", b)
			}
		})
	}
}

func TestNotesEightByteAligned(t *testing.T) {
	// A GNU property note in an 8-aligned area: the desc starts at 16.
	bo := binary.LittleEndian
	var d []byte
	d = bo.AppendUint32(d, 4)
	d = bo.AppendUint32(d, 16)
	d = bo.AppendUint32(d, 5)
	d = append(d, "GNU\x00"...)
	d = append(d, make([]byte, 16)...)
	notes, err := parseNotes(nil, d, 0, 8, elf.ELFCLASS64, bo, newInterner(0))
	if err != nil || len(notes) != 0 {
		t.Fatalf("got %v, %v", notes, err)
	}
}

// TestHostileNotes feeds malformed note areas: each gives a FormatError
// naming its offset, never a panic or a large allocation.
func TestHostileNotes(t *testing.T) {
	bo := binary.LittleEndian
	good := encodeNotes(elf.ELFCLASS64, bo, []testNote{{location: testTextAddr, provider: "p", name: "n", args: "8@%rdi"}})
	hdr := func(namesz, descsz, typ uint32) []byte {
		var b []byte
		b = bo.AppendUint32(b, namesz)
		b = bo.AppendUint32(b, descsz)
		return bo.AppendUint32(b, typ)
	}
	addrs := make([]byte, 24)
	for _, c := range []struct {
		name string
		data []byte
		msg  string
	}{
		{"huge descsz", append(append(hdr(8, 0xffffffff, 3), "stapsdt\x00"...), addrs...), "crosses the end"},
		{"huge namesz", append(hdr(0xfffffff0, 4, 3), "stapsdt\x00"...), "crosses the end"},
		{"cut header", append(append([]byte{}, good...), 1, 2, 3), "header cut"},
		{"crosses end", good[:len(good)-8], "crosses the end"},
		{"short desc", encodeNotes(elf.ELFCLASS64, bo, []testNote{{desc: make([]byte, 26)}}), "at least 27"},
		{"unterminated provider", encodeNotes(elf.ELFCLASS64, bo, []testNote{{desc: append(make([]byte, 24), "provname"...)}}), "provider not NUL-terminated"},
		{"unterminated args", encodeNotes(elf.ELFCLASS64, bo, []testNote{{desc: append(make([]byte, 24), "p\x00n\x008@%rdi"...)}}), "argument string not NUL-terminated"},
		{"empty name", encodeNotes(elf.ELFCLASS64, bo, []testNote{{provider: "p", name: "", args: ""}}), "empty provider or name"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := parseNotes(nil, c.data, 0x400, 4, elf.ELFCLASS64, bo, newInterner(0))
			var fe *FormatError
			if !errors.As(err, &fe) || !strings.Contains(fe.Msg, c.msg) || fe.Off < 0x400 {
				t.Errorf("err = %v, want FormatError containing %q at offset >= 0x400", err, c.msg)
			}
			// The same bytes in a whole file.
			_, err = Parse(bytes.NewReader(buildELF(elf.ELFCLASS64, bo, elf.EM_X86_64, nops16, c.data)))
			if !errors.As(err, &fe) {
				t.Errorf("Parse: %v, want a FormatError", err)
			}
		})
	}
	// Trailing zero padding is not an error.
	if n, err := parseNotes(nil, append(append([]byte{}, good...), 0, 0, 0, 0), 0, 4, elf.ELFCLASS64, bo, newInterner(0)); err != nil || len(n) != 1 {
		t.Errorf("padding: %v, %v", n, err)
	}
}

// readerAtOnly hides the size of its reader, so reads cannot be checked
// against the file size up front.
type readerAtOnly struct{ r *bytes.Reader }

func (r readerAtOnly) ReadAt(p []byte, off int64) (int, error) { return r.r.ReadAt(p, off) }

// TestHostileSizesBoundedMemory: header fields claiming gigabytes cost at
// most a chunk, whether or not the reader tells its size.
func TestHostileSizesBoundedMemory(t *testing.T) {
	const limit = 4 << 20
	bo := binary.LittleEndian
	file := buildELF(elf.ELFCLASS64, bo, elf.EM_X86_64, nops16, encodeNotes(elf.ELFCLASS64, bo, []testNote{{location: testTextAddr, provider: "p", name: "n"}}))
	ef, err := elf.NewFile(bytes.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	shoff := int(bo.Uint64(file[40:]))
	ef.Close()
	patch := func(name string, fn func(b []byte)) {
		b := append([]byte(nil), file...)
		fn(b)
		for _, r := range []struct {
			kind string
			r    interface {
				ReadAt([]byte, int64) (int, error)
			}
		}{{"sized", bytes.NewReader(b)}, {"unsized", readerAtOnly{bytes.NewReader(b)}}} {
			var perr error
			grew := testkit.HeapGrowth(func() { _, perr = Parse(r.r) })
			if perr == nil {
				t.Errorf("%s/%s: no error", name, r.kind)
			}
			if grew > limit {
				t.Errorf("%s/%s: allocated %d bytes (limit %d): %v", name, r.kind, grew, limit, perr)
			}
		}
	}
	// Section 3 is .note.stapsdt: sh_size at +32.
	patch("note sh_size 4 GiB", func(b []byte) { bo.PutUint64(b[shoff+3*64+32:], 1<<32) })
	patch("note sh_size 2^63", func(b []byte) { bo.PutUint64(b[shoff+3*64+32:], 1<<63) })
	patch("shstrtab sh_size 1 GiB", func(b []byte) { bo.PutUint64(b[shoff+4*64+32:], 1<<30) })
	patch("e_shnum 0 with extended count 2^40", func(b []byte) {
		bo.PutUint16(b[60:], 0)
		bo.PutUint64(b[shoff+32:], 1<<40)
	})
	patch("e_shoff past the end", func(b []byte) { bo.PutUint64(b[40:], 1<<40) })
	patch("e_phnum 65535 (PN_XNUM) with sh_info 2^31", func(b []byte) {
		bo.PutUint16(b[56:], 0xffff)
		bo.PutUint32(b[shoff+44:], 1<<31)
	})
}

// TestManyNotes: 100,000 notes parse, with memory proportional to them.
func TestManyNotes(t *testing.T) {
	bo := binary.LittleEndian
	const n = 100_000
	notes := make([]testNote, n)
	for i := range notes {
		notes[i] = testNote{location: testTextAddr + uint64(i%16), provider: "p", name: "n" + string(rune('a'+i%26)), args: "8@%rdi -4@$5"}
	}
	file := buildELF(elf.ELFCLASS64, bo, elf.EM_X86_64, nops16, encodeNotes(elf.ELFCLASS64, bo, notes))
	var f *File
	var err error
	grew := testkit.HeapGrowth(func() { f, err = Parse(bytes.NewReader(file)) })
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, p := range f.Probes {
		total += len(p.Locations)
	}
	if len(f.Probes) != 26 || total != n {
		t.Errorf("%d probes, %d locations", len(f.Probes), total)
	}
	// The note data itself, then one rawNote and one Location per note
	// (about 250 bytes together); 512 leaves room, a per-note allocation
	// of the arguments or quadratic growth would not fit.
	t.Logf("%d notes: %d bytes allocated, %d per note", n, grew, grew/n)
	if limit := uint64(len(file)) + n*512; grew > limit {
		t.Errorf("allocated %d bytes for %d notes (limit %d)", grew, n, limit)
	}
}
