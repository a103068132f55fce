package safeelf

import (
	"bytes"
	"debug/elf"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/probekit/probekit/internal/test/testkit"
)

// sizeless hides the size of a reader, so that reads must grow with what
// the file delivers.
type sizeless struct{ r io.ReaderAt }

func (s sizeless) ReadAt(p []byte, off int64) (int, error) { return s.r.ReadAt(p, off) }

// shdrField is the offset of a section header field, by class.
func shdrField(class elf.Class, field string) int {
	off64 := map[string]int{"type": 4, "offset": 24, "size": 32, "link": 40, "info": 44, "entsize": 56}
	off32 := map[string]int{"type": 4, "offset": 16, "size": 20, "link": 24, "info": 28, "entsize": 36}
	if class == elf.ELFCLASS64 {
		return off64[field]
	}
	return off32[field]
}

// patcher edits copies of a fixture.
type patcher struct {
	t    *testing.T
	data []byte
	f    *File
}

func newPatcher(t *testing.T, fixture string) *patcher {
	data, err := os.ReadFile(testkit.Fixture(fixture))
	if err != nil {
		t.Fatal(err)
	}
	f, err := NewFile(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	return &patcher{t, data, f}
}

func (p *patcher) section(name string) *Section {
	s := p.f.Section(name)
	if s == nil {
		p.t.Fatalf("no section %s", name)
	}
	return s
}

// put writes v (4 or 8 bytes wide as the class has it for offsets and
// sizes) at off in a copy.
func (p *patcher) put(b []byte, off int, v uint64, wide bool) {
	if wide && p.f.Class == elf.ELFCLASS64 {
		p.f.ByteOrder.PutUint64(b[off:], v)
	} else {
		p.f.ByteOrder.PutUint32(b[off:], uint32(v))
	}
}

// header patches field of section name's header.
func (p *patcher) header(name, field string, v uint64) []byte {
	b := append([]byte(nil), p.data...)
	wide := field == "offset" || field == "size" || field == "entsize"
	p.put(b, int(p.section(name).HeaderOff)+shdrField(p.f.Class, field), v, wide)
	return b
}

// at patches the bytes at off.
func (p *patcher) at(off uint64, v []byte) []byte {
	b := append([]byte(nil), p.data...)
	copy(b[off:], v)
	return b
}

// readAll calls every accessor; it returns the first error.
func readAll(r io.ReaderAt) error {
	f, err := NewFile(r)
	if err != nil {
		return err
	}
	var errs []error
	for _, get := range []func() (*Symbols, error){f.Symbols, f.DynamicSymbols} {
		s, err := get()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for i := range s.Len() {
			sym := s.Symbol(i)
			s.Lookup(sym.Name, func(int) bool { return false })
		}
	}
	fns, err := f.Functions()
	if err != nil {
		errs = append(errs, err)
	} else {
		for i := range fns.Len() {
			fn := fns.Func(i)
			fns.At(fn.Address)
			fns.Lookup(fn.Name, func(int) bool { return true })
		}
		for _, pattern := range []string{"*a*", "a*", "_Z*", "m*@*", "*@@GLIBC_2.?"} {
			fns.Match(pattern, func(i int) bool { fns.Func(i); return true })
		}
	}
	if gt, err := f.GoTable(); err == nil {
		for _, g := range gt.Funcs[:min(len(gt.Funcs), 100)] {
			gt.LineAt(g.Entry)
		}
	} else {
		errs = append(errs, err)
	}
	for _, err := range errs {
		if !errors.Is(err, ErrNoSymbols) {
			return err
		}
	}
	return nil
}

// TestHostileSymbols: corrupt symbol tables give a *FormatError located
// at the offending structure, never a panic, and cost little memory
// whether or not the reader tells the file's size.
func TestHostileSymbols(t *testing.T) {
	for _, fixture := range []string{"usdt_sample", "usdt_sample_i386", "usdt_sample_s390x"} {
		p := newPatcher(t, fixture)
		symtab, dynsym := p.section(".symtab"), p.section(".dynsym")
		versym := p.section(".gnu.version")
		verneed := p.section(".gnu.version_r")
		ent := symtab.Entsize
		huge := uint64(1 << 40)
		if p.f.Class == elf.ELFCLASS32 {
			huge = 0xfffff000
		}
		name5 := make([]byte, 4)
		p.f.ByteOrder.PutUint32(name5, 0xfffff0)
		bigVer := make([]byte, 2)
		p.f.ByteOrder.PutUint16(bigVer, 99)
		badNext := make([]byte, 4)
		p.f.ByteOrder.PutUint32(badNext, 0x7fff0000)
		for _, tc := range []struct {
			name string
			file []byte
			off  uint64 // where the error must be located; 0: anywhere
			msg  string
		}{
			{"huge sh_size", p.header(".symtab", "size", huge-huge%ent), 0, ""},
			{"sh_size past the end", p.header(".symtab", "size", uint64(len(p.data))/ent*ent), 0, "beyond the end"},
			{"sh_size not a multiple", p.header(".symtab", "size", symtab.Size+1), symtab.HeaderOff, "not a multiple"},
			{"sh_entsize", p.header(".symtab", "entsize", 7), symtab.HeaderOff, "entry size"},
			{"sh_link out of range", p.header(".symtab", "link", 999), symtab.HeaderOff, "out of range"},
			{"sh_link not a string table", p.header(".dynsym", "link", uint64(symtab.Index)), 0, "SHT_STRTAB"},
			{"huge string table", p.header(".strtab", "size", huge), 0, ""},
			{"string table without NUL", p.header(".strtab", "size", p.section(".strtab").Size-1), 0, "NUL"},
			{"st_name past the table", p.at(symtab.Offset+5*ent, name5), symtab.Offset + 5*ent, "past"},
			{"dynsym st_name past the table", p.at(dynsym.Offset+2*dynsym.Entsize, name5), dynsym.Offset + 2*dynsym.Entsize, "past"},
			{"versions table short", p.header(".gnu.version", "size", 2), versym.HeaderOff, "symbols"},
			{"version index undefined", p.at(versym.Offset+2, bigVer), versym.Offset + 2, "version index 99"},
			{"version need next", p.at(verneed.Offset+12, badNext), verneed.Offset + 0x7fff0000, "past the section"},
			{"version need aux", p.at(verneed.Offset+8, badNext), verneed.Offset, "past the section"},
			{"huge version section", p.header(".gnu.version_r", "size", huge), 0, ""},
		} {
			t.Run(fixture+"/"+tc.name, func(t *testing.T) {
				for _, r := range []io.ReaderAt{bytes.NewReader(tc.file), sizeless{bytes.NewReader(tc.file)}} {
					var err error
					grew := testkit.HeapGrowth(func() { err = readAll(r) })
					var fe *FormatError
					if !errors.As(err, &fe) {
						t.Fatalf("err = %v, want a *FormatError", err)
					}
					if tc.off != 0 && uint64(fe.Off) != tc.off {
						t.Errorf("error at %#x, want %#x: %v", fe.Off, tc.off, err)
					}
					if !strings.Contains(err.Error(), tc.msg) {
						t.Errorf("err = %v, want %q", err, tc.msg)
					}
					if limit := uint64(4 << 20); grew > limit {
						t.Errorf("%T: allocated %d bytes, more than %d", r, grew, limit)
					}
				}
			})
		}
	}
}

// TestHostilePCLNTab: a stripped Go program whose .gopclntab lies.
func TestHostilePCLNTab(t *testing.T) {
	p := newPatcher(t, "goprog_stripped")
	sec := p.section(".gopclntab")
	for _, tc := range []struct {
		name string
		file []byte
	}{
		{"huge size", p.header(".gopclntab", "size", 1<<40)},
		{"past the end", p.header(".gopclntab", "offset", uint64(len(p.data))-16)},
		{"bad magic", p.at(sec.Offset, []byte{1, 2, 3, 4})},
		{"pointer size", p.at(sec.Offset+7, []byte{5})},
		{"truncated", p.header(".gopclntab", "size", 12)},
		{"nobits", p.header(".gopclntab", "type", uint64(elf.SHT_NOBITS))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			grew := testkit.HeapGrowth(func() { err = readAll(bytes.NewReader(tc.file)) })
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("err = %v, want a *FormatError", err)
			}
			if limit := uint64(8 << 20); grew > limit {
				t.Errorf("allocated %d bytes, more than %d", grew, limit)
			}
		})
	}
	// Garbage in the table body: an error or functions, never a panic.
	for _, at := range []uint64{64, sec.Size / 3, sec.Size / 2} {
		b := append([]byte(nil), p.data...)
		for i := range uint64(256) {
			b[sec.Offset+at+i] ^= byte(0x5a + i)
		}
		_ = readAll(bytes.NewReader(b))
	}
}

// TestEveryTruncation: each fixture cut short at many lengths, read
// through every accessor: no panic.
func TestEveryTruncation(t *testing.T) {
	for _, fixture := range []string{"usdt_sample", "usdt_sample_armhf", "usdt_sample_ppc64", "libusdt_lib.so"} {
		data, err := os.ReadFile(testkit.Fixture(fixture))
		if err != nil {
			t.Fatal(err)
		}
		for n := 0; n < len(data); n += 1 + n/64 {
			_ = readAll(bytes.NewReader(data[:n]))
		}
	}
}
