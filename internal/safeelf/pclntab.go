package safeelf

import (
	"debug/elf"
	"debug/gosym"
	"encoding/binary"
	"fmt"
	"slices"
)

// Go's function table, .gopclntab, survives go build -ldflags=-s -w,
// which removes .symtab: it is how a stripped Go program's functions are
// found (the runtime needs it for tracebacks).

// maxPCLNTab bounds the .gopclntab section read. Large real programs
// (kubelet, cockroach) carry 20-60 MiB tables.
const maxPCLNTab = 512 << 20

// maxRelaScan bounds one RELA section searched for the relocated
// runtime.text of a PIE: a Go PIE has tens of thousands of relocations,
// 24 bytes each.
const maxRelaScan = 64 << 20

// pclntab header magics (the first 4 bytes, in the file's byte order), by
// the Go version that introduced each layout (src/internal/abi/symtab.go).
const (
	magicGo12  = 0xfffffffb
	magicGo116 = 0xfffffffa
	magicGo118 = 0xfffffff0
	magicGo120 = 0xfffffff1
)

// GoFunc is one function of .gopclntab.
type GoFunc struct {
	// Name is package-qualified: main.add, net/http.(*conn).serve.
	Name string
	// Entry is the link-time address of the first instruction; End the
	// address after the last byte, the padding up to the next function
	// included.
	Entry, End uint64
}

// GoTable is the decoded .gopclntab of a Go program.
type GoTable struct {
	// Funcs are in the table's order, which is address order.
	Funcs []GoFunc
	// TextStart is the address pclntab offsets are relative to
	// (runtime.text).
	TextStart uint64

	tab *gosym.Table
	// For the inline trees (goinline.go).
	data []byte
	inl  *goInline
}

// GoTable reads and decodes .gopclntab. It fails with ErrNoSymbols when
// the file has no such section (not Go, or section headers stripped too:
// finding the table by its magic is not implemented).
func (f *File) GoTable() (gt *GoTable, err error) {
	sec := f.Section(".gopclntab")
	if sec == nil {
		return nil, ErrNoSymbols
	}
	if sec.Type == elf.SHT_NOBITS {
		return nil, errorf(sec.HeaderOff, ".gopclntab has no bytes in the file (SHT_NOBITS)")
	}
	data, err := f.ReadAt(sec.Offset, sec.Size, maxPCLNTab)
	if err != nil {
		return nil, err
	}
	text, err := f.goTextStart(sec, data)
	if err != nil {
		return nil, err
	}
	if err := checkPCLNHeader(data, f.ByteOrder); err != nil {
		return nil, errorf(sec.Offset, ".gopclntab: %v", err)
	}
	// debug/gosym recovers from most index panics itself, but not all
	// of them (it trusts the table).
	defer Recover(&err)
	tab, err := gosym.NewTable(nil, gosym.NewLineTable(data, text))
	if err != nil {
		return nil, errorf(sec.Offset, ".gopclntab: %v", err)
	}
	gt = &GoTable{TextStart: text, tab: tab, Funcs: make([]GoFunc, 0, len(tab.Funcs)), data: data}
	for _, fn := range tab.Funcs {
		if fn.End <= fn.Entry || fn.Name == "" {
			continue
		}
		gt.Funcs = append(gt.Funcs, GoFunc{Name: fn.Name, Entry: fn.Entry, End: fn.End})
	}
	gt.inl = gt.readInline(f, sec)
	return gt, nil
}

// LineAt returns the source file and line of the instruction at pc, and
// the function holding it; "" when the table does not cover pc.
func (t *GoTable) LineAt(pc uint64) (file string, line int, fn string) {
	defer func() {
		if recover() != nil {
			file, line, fn = "", 0, ""
		}
	}()
	i, ok := slices.BinarySearchFunc(t.Funcs, pc, func(g GoFunc, pc uint64) int {
		switch {
		case g.End <= pc:
			return -1
		case g.Entry > pc:
			return 1
		}
		return 0
	})
	if !ok {
		return "", 0, ""
	}
	file, line, f := t.tab.PCToLine(pc)
	if f == nil {
		return "", 0, t.Funcs[i].Name
	}
	return file, line, f.Name
}

// goTextStart returns the runtime.text address pclntab entries are
// relative to (Go 1.18+). It is not .text's address in cgo binaries,
// where C code comes first, so it is read from the table's header word at
// 8+2*ptrSize. In a PIE linked with RELA relocations that word is 0 in
// the file and its value is the addend of an R_*_RELATIVE relocation on
// it; with RELR (or non-PIE) the word holds the value itself.
func (f *File) goTextStart(sec *Section, data []byte) (uint64, error) {
	fallback := uint64(0)
	if text := f.Section(".text"); text != nil {
		fallback = text.Addr
	}
	if len(data) < 8 {
		return 0, errorf(sec.Offset, ".gopclntab too short (%d bytes)", len(data))
	}
	bo := f.ByteOrder
	magic := bo.Uint32(data)
	if magic != magicGo118 && magic != magicGo120 {
		if magic == magicGo12 || magic == magicGo116 {
			return fallback, nil // entries are absolute PCs
		}
		return 0, errorf(sec.Offset, ".gopclntab has unknown magic %#x", magic)
	}
	ptr := int(data[7])
	if ptr != 4 && ptr != 8 {
		return 0, errorf(sec.Offset+7, ".gopclntab has pointer size %d", ptr)
	}
	at := 8 + 2*ptr
	if len(data) < at+ptr {
		return 0, errorf(sec.Offset, ".gopclntab header truncated")
	}
	var text uint64
	if ptr == 8 {
		text = bo.Uint64(data[at:])
	} else {
		text = uint64(bo.Uint32(data[at:]))
	}
	if text != 0 {
		return text, nil
	}
	v, ok, err := f.relativeAddend(sec.Addr + uint64(at))
	if err != nil {
		return 0, err
	}
	if ok {
		return v, nil
	}
	if fallback == 0 {
		return 0, errorf(sec.Offset+uint64(at), ".gopclntab text start is unrelocated and no .text section gives it")
	}
	return fallback, nil
}

// relativeAddend finds the R_X86_64_RELATIVE / R_AARCH64_RELATIVE
// relocation (ELF64 RELA) targeting vaddr and returns its addend, the
// link-time value the dynamic loader stores there.
func (f *File) relativeAddend(vaddr uint64) (v uint64, found bool, err error) {
	err = f.relativeRelocs(func(off, addend uint64) bool {
		if off == vaddr {
			v, found = addend, true
		}
		return !found
	})
	return v, found, err
}

// relativeRelocs calls yield with the target and addend of each
// R_X86_64_RELATIVE / R_AARCH64_RELATIVE relocation (ELF64 RELA) until it
// returns false.
func (f *File) relativeRelocs(yield func(off, addend uint64) bool) error {
	var relative uint32
	switch f.Machine {
	case elf.EM_X86_64:
		relative = uint32(elf.R_X86_64_RELATIVE)
	case elf.EM_AARCH64:
		relative = uint32(elf.R_AARCH64_RELATIVE)
	default:
		return nil
	}
	if f.Class != elf.ELFCLASS64 {
		return nil
	}
	bo := f.ByteOrder
	for i := range f.Sections {
		s := &f.Sections[i]
		if s.Type != elf.SHT_RELA {
			continue
		}
		data, err := f.ReadAt(s.Offset, s.Size, maxRelaScan)
		if err != nil {
			return fmt.Errorf("%s: %w", s.Name, err)
		}
		for i := 0; i+24 <= len(data); i += 24 { // Elf64_Rela: r_offset, r_info, r_addend
			if elf.R_TYPE64(bo.Uint64(data[i+8:])) == relative && !yield(bo.Uint64(data[i:]), bo.Uint64(data[i+16:])) {
				return nil
			}
		}
	}
	return nil
}

// checkPCLNHeader checks what debug/gosym trusts in a table's header:
// that the function table the header counts lies in data. gosym
// recovers from the slice panic a larger count causes, but keeps the
// count, then allocates a Func (96 bytes) for each: a 200-byte table
// claiming 3,841,982,466 functions asked for 358 GiB. Layouts (Go's
// src/internal/abi/symtab.go, runtime/symtab.go): magic, 2 zero bytes,
// pc quantum, pointer size, then pointer-sized words: Go 1.2 the count
// and the table (2n+1 pointer-sized fields, then a 4-byte file table
// offset); Go 1.16 the count, the files' count, then 5 offsets, the
// last the function table's (2n+1 pointer-sized fields); Go 1.18 and
// 1.20 the same with a text start word first, and 4-byte fields.
func checkPCLNHeader(data []byte, bo binary.ByteOrder) error {
	if len(data) < 16 {
		return nil // gosym reads it as a Go 1.1 table: no functions
	}
	ptr := uint64(data[7])
	if ptr != 4 && ptr != 8 {
		return nil // refused by gosym
	}
	word := func(i uint64) (uint64, bool) {
		at := 8 + i*ptr
		if at+ptr > uint64(len(data)) {
			return 0, false
		}
		if ptr == 4 {
			return uint64(bo.Uint32(data[at:])), true
		}
		return bo.Uint64(data[at:]), true
	}
	var tabOff, field uint64
	extra := uint64(0)
	switch bo.Uint32(data) {
	case magicGo12:
		tabOff, field, extra = 8+ptr, ptr, 4
	case magicGo116:
		o, ok := word(6)
		if !ok {
			return fmt.Errorf("header of %d bytes cut short", len(data))
		}
		tabOff, field = o, ptr
	case magicGo118, magicGo120:
		o, ok := word(7)
		if !ok {
			return fmt.Errorf("header of %d bytes cut short", len(data))
		}
		tabOff, field = o, 4
	default:
		return nil
	}
	n, ok := word(0)
	if !ok {
		return fmt.Errorf("header of %d bytes cut short", len(data))
	}
	n = uint64(uint32(n)) // gosym keeps 32 bits
	if tabOff > uint64(len(data)) || (2*n+1)*field+extra > uint64(len(data))-tabOff {
		return fmt.Errorf("%d functions: their table at %#x does not fit in %d bytes", n, tabOff, len(data))
	}
	return nil
}
