package testkit

import (
	"debug/elf"
	"strings"
	"testing"
)

// This file reads fixtures with debug/elf only, for tests of packages the
// usdt note parser depends on (or that must not trust it).

// SymbolOffset returns the link-time address and the file offset of the
// symbol name (from .symtab, else .dynsym) of the ELF file at path.
func SymbolOffset(tb testing.TB, path, name string) (vaddr, off uint64) {
	tb.Helper()
	f, syms := openSymbols(tb, path, true)
	defer f.Close()
	for _, s := range syms {
		if s.Name == name {
			return s.Value, FileOffset(tb, f, s.Value)
		}
	}
	tb.Fatalf("%s: no symbol %s", path, name)
	return 0, 0
}

// openSymbols opens the ELF file at path and reads its .symtab, else
// (with dynamic set) its .dynsym. The caller closes the file.
func openSymbols(tb testing.TB, path string, dynamic bool) (*elf.File, []elf.Symbol) {
	tb.Helper()
	f, err := elf.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	syms, err := f.Symbols()
	if err != nil && dynamic {
		syms, err = f.DynamicSymbols()
	}
	if err != nil {
		f.Close()
		tb.Fatalf("%s: %v", path, err)
	}
	return f, syms
}

// FileOffset translates vaddr through the PT_LOAD holding it in the file
// (vaddr − p_vaddr + p_offset).
func FileOffset(tb testing.TB, f *elf.File, vaddr uint64) uint64 {
	tb.Helper()
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && vaddr >= p.Vaddr && vaddr < p.Vaddr+p.Filesz {
			return vaddr - p.Vaddr + p.Off
		}
	}
	tb.Fatalf("vaddr %#x in no PT_LOAD", vaddr)
	return 0
}

// Note is one stapsdt note, read without the usdt package.
type Note struct {
	Provider, Name, Args      string
	Location, Base, Semaphore uint64
}

// Notes returns the stapsdt notes of the 64-bit ELF file at path, in
// file order, and the opened file (closed when the test ends).
func Notes(tb testing.TB, path string) ([]Note, *elf.File) {
	tb.Helper()
	f, err := elf.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { f.Close() })
	sec := f.Section(".note.stapsdt")
	if sec == nil {
		tb.Fatalf("%s: no .note.stapsdt", path)
	}
	data, err := sec.Data()
	if err != nil {
		tb.Fatal(err)
	}
	bo := f.ByteOrder
	var notes []Note
	for len(data) >= 12 {
		// Elf_Nhdr, then name and desc each padded to 4 bytes.
		namesz, descsz, typ := bo.Uint32(data), bo.Uint32(data[4:]), bo.Uint32(data[8:])
		nameEnd := 12 + (int(namesz)+3)&^3
		descEnd := nameEnd + (int(descsz)+3)&^3
		if descEnd > len(data) {
			tb.Fatalf("%s: truncated note", path)
		}
		owner, desc := data[12:12+int(namesz)], data[nameEnd:nameEnd+int(descsz)]
		data = data[descEnd:]
		if typ != 3 || string(owner) != "stapsdt\x00" || len(desc) < 27 {
			continue
		}
		strs := strings.SplitN(string(desc[24:]), "\x00", 4)
		if len(strs) < 3 {
			tb.Fatalf("%s: unterminated note strings", path)
		}
		notes = append(notes, Note{
			Provider: strs[0], Name: strs[1], Args: strs[2],
			Location: bo.Uint64(desc), Base: bo.Uint64(desc[8:]), Semaphore: bo.Uint64(desc[16:]),
		})
	}
	return notes, f
}
