package uprobe

import (
	"debug/elf"
	"debug/gosym"
	"fmt"
	"io"
)

// maxPCLNTab bounds the .gopclntab section read for a stripped Go binary.
// Large real programs (kubelet, cockroach) carry 20-60 MiB tables; beyond
// this the section header is lying.
const maxPCLNTab = 512 << 20

// maxRelaScan bounds the dynamic relocations searched for the relocated
// runtime.text of a PIE (a Go PIE has tens of thousands; each is 24 bytes).
const maxRelaScan = 64 << 20

// pclntab header magics (the first 4 bytes, in the file's byte order), by
// the Go version that introduced each layout (src/internal/abi/symtab.go).
const (
	magicGo12  = 0xfffffffb
	magicGo116 = 0xfffffffa
	magicGo118 = 0xfffffff0
	magicGo120 = 0xfffffff1
)

// goFunctions lists the functions of a Go program from .gopclntab, for
// binaries built with -ldflags=-s (no .symtab). Sizes are End-Entry of
// each pclntab entry, which include the function's trailing padding up to
// the next entry: the RET scan must not take INT3/zero padding for code,
// and it does not, since padding decodes as INT3 or as an instruction that
// is not a RET.
func (b *Binary) goFunctions(ef *elf.File) (fns []Function, err error) {
	sec := ef.Section(".gopclntab")
	if sec == nil {
		// Section headers gone too (sstrip): finding the table by magic
		// or through runtime.firstmoduledata is not implemented.
		return nil, nil
	}
	if sec.Type == elf.SHT_NOBITS || sec.Size > maxPCLNTab {
		return nil, fmt.Errorf("uprobe: %s: .gopclntab of %d bytes is not readable (limit %d)", b.display, sec.Size, maxPCLNTab)
	}
	data, err := io.ReadAll(io.LimitReader(sec.Open(), int64(sec.Size)))
	if err != nil {
		return nil, fmt.Errorf("uprobe: %s: read .gopclntab: %w", b.display, err)
	}
	text, err := goTextStart(ef, sec, data)
	if err != nil {
		return nil, fmt.Errorf("uprobe: %s: %w", b.display, err)
	}

	// debug/gosym recovers from most index panics itself, but not all of
	// them (it trusts the table); this one stays local to the parse.
	defer func() {
		if r := recover(); r != nil {
			fns, err = nil, fmt.Errorf("uprobe: %s: malformed .gopclntab (parser panic: %v)", b.display, r)
		}
	}()
	tab, err := gosym.NewTable(nil, gosym.NewLineTable(data, text))
	if err != nil {
		return nil, fmt.Errorf("uprobe: %s: parse .gopclntab: %w", b.display, err)
	}
	outside := 0
	for _, f := range tab.Funcs {
		if f.End <= f.Entry || f.Name == "" {
			continue
		}
		off, ok := b.fileOffset(f.Entry)
		if !ok {
			outside++
			continue
		}
		fns = append(fns, Function{
			Name: f.Name, Address: f.Entry, Offset: off, Size: f.End - f.Entry,
			Global: true, Source: GoPCLNTab,
		})
	}
	if len(fns) == 0 && outside > 0 {
		return nil, fmt.Errorf("uprobe: %s: none of the %d .gopclntab functions lies in an executable segment (text start %#x wrong?)", b.display, outside, text)
	}
	b.skipped += outside
	return fns, nil
}

// goTextStart returns the runtime.text address pclntab entries are
// relative to (Go 1.18+). It is not .text's address in cgo binaries, where
// C code comes first, so it is read from the table's header word at
// 8+2*ptrSize. In a PIE linked with RELA relocations that word is 0 in the
// file and its value is the addend of an R_*_RELATIVE relocation on it;
// with RELR (or non-PIE) the word holds the value itself.
func goTextStart(ef *elf.File, sec *elf.Section, data []byte) (uint64, error) {
	fallback := uint64(0)
	if text := ef.Section(".text"); text != nil {
		fallback = text.Addr
	}
	if len(data) < 8 {
		return 0, fmt.Errorf(".gopclntab too short (%d bytes)", len(data))
	}
	bo := ef.ByteOrder
	magic := bo.Uint32(data)
	if magic != magicGo118 && magic != magicGo120 {
		if magic == magicGo12 || magic == magicGo116 {
			return fallback, nil // entries are absolute PCs
		}
		return 0, fmt.Errorf(".gopclntab has unknown magic %#x", magic)
	}
	ptr := int(data[7])
	if ptr != 4 && ptr != 8 {
		return 0, fmt.Errorf(".gopclntab has pointer size %d", ptr)
	}
	at := 8 + 2*ptr
	if len(data) < at+ptr {
		return 0, fmt.Errorf(".gopclntab header truncated")
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
	if v, ok := relativeAddend(ef, sec.Addr+uint64(at)); ok {
		return v, nil
	}
	if fallback == 0 {
		return 0, fmt.Errorf(".gopclntab text start is unrelocated and no .text section gives it")
	}
	return fallback, nil
}

// relativeAddend finds the R_X86_64_RELATIVE / R_AARCH64_RELATIVE
// relocation (ELF64 RELA) targeting vaddr and returns its addend, the
// link-time value the dynamic loader stores there.
func relativeAddend(ef *elf.File, vaddr uint64) (uint64, bool) {
	var relative uint32
	switch ef.Machine {
	case elf.EM_X86_64:
		relative = uint32(elf.R_X86_64_RELATIVE)
	case elf.EM_AARCH64:
		relative = uint32(elf.R_AARCH64_RELATIVE)
	default:
		return 0, false
	}
	if ef.Class != elf.ELFCLASS64 {
		return 0, false
	}
	for _, s := range ef.Sections {
		if s.Type != elf.SHT_RELA || s.Size > maxRelaScan {
			continue
		}
		data, err := io.ReadAll(io.LimitReader(s.Open(), int64(s.Size)))
		if err != nil {
			continue
		}
		bo := ef.ByteOrder
		for i := 0; i+24 <= len(data); i += 24 { // Elf64_Rela: r_offset, r_info, r_addend
			if bo.Uint64(data[i:]) == vaddr && elf.R_TYPE64(bo.Uint64(data[i+8:])) == relative {
				return bo.Uint64(data[i+16:]), true
			}
		}
	}
	return 0, false
}
