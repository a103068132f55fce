// Command noshdr writes a copy of an ELF file without section headers:
// e_shoff, e_shnum and e_shstrndx are zeroed and the section header table,
// when it ends the file, is cut off. It builds the fixture that proves the
// note parser finds .note.stapsdt through PT_NOTE alone.
//
// sys/sdt.h emits .note.stapsdt unallocated, so no PT_NOTE covers it and a
// linker cannot be asked to (objcopy turns a re-flagged note into
// PROGBITS). The tool therefore points the first PT_NOTE program header at
// the section before dropping the section headers: the shape of a binary
// whose producer allocated its USDT notes.
//
//	go run ./internal/tools/noshdr IN OUT
package main

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: noshdr IN OUT")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "noshdr:", err)
		os.Exit(1)
	}
}

func run(in, out string) error {
	data, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	if err := coverNotes(in, data); err != nil {
		return err
	}
	if len(data) < 64 || string(data[:4]) != elf.ELFMAG {
		return fmt.Errorf("%s: not an ELF file", in)
	}
	var bo binary.ByteOrder = binary.LittleEndian
	if elf.Data(data[elf.EI_DATA]) == elf.ELFDATA2MSB {
		bo = binary.BigEndian
	}
	// Field offsets from the ELF header layouts (gABI, "ELF Header").
	var shoff uint64
	var shentsize, shnum uint64
	switch elf.Class(data[elf.EI_CLASS]) {
	case elf.ELFCLASS64:
		shoff = bo.Uint64(data[40:])
		shentsize, shnum = uint64(bo.Uint16(data[58:])), uint64(bo.Uint16(data[60:]))
		bo.PutUint64(data[40:], 0)
		bo.PutUint16(data[60:], 0)
		bo.PutUint16(data[62:], 0)
	case elf.ELFCLASS32:
		shoff = uint64(bo.Uint32(data[32:]))
		shentsize, shnum = uint64(bo.Uint16(data[46:])), uint64(bo.Uint16(data[48:]))
		bo.PutUint32(data[32:], 0)
		bo.PutUint16(data[48:], 0)
		bo.PutUint16(data[50:], 0)
	default:
		return fmt.Errorf("%s: unknown ELF class", in)
	}
	if end := shoff + shentsize*shnum; shoff > 0 && end == uint64(len(data)) {
		data = data[:shoff]
	}
	return os.WriteFile(out, data, 0o755)
}

// coverNotes rewrites the first PT_NOTE header of data to cover the
// .note.stapsdt section.
func coverNotes(name string, data []byte) error {
	f, err := elf.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	sec := f.Section(".note.stapsdt")
	if sec == nil {
		return fmt.Errorf("%s: no .note.stapsdt section", name)
	}
	var bo binary.ByteOrder = binary.LittleEndian
	if f.Data == elf.ELFDATA2MSB {
		bo = binary.BigEndian
	}
	is64 := f.Class == elf.ELFCLASS64
	var phoff, phentsize uint64
	if is64 {
		phoff, phentsize = bo.Uint64(data[32:]), uint64(bo.Uint16(data[54:]))
	} else {
		phoff, phentsize = uint64(bo.Uint32(data[28:])), uint64(bo.Uint16(data[42:]))
	}
	for i, p := range f.Progs {
		if p.Type != elf.PT_NOTE {
			continue
		}
		h := data[phoff+uint64(i)*phentsize:]
		// Elf64_Phdr: type 0, flags 4, offset 8, vaddr 16, paddr 24,
		// filesz 32, memsz 40, align 48. Elf32_Phdr: type 0, offset 4,
		// vaddr 8, paddr 12, filesz 16, memsz 20, flags 24, align 28.
		if is64 {
			bo.PutUint64(h[8:], sec.Offset)
			bo.PutUint64(h[16:], 0)
			bo.PutUint64(h[24:], 0)
			bo.PutUint64(h[32:], sec.Size)
			bo.PutUint64(h[40:], 0)
			bo.PutUint64(h[48:], 4)
		} else {
			bo.PutUint32(h[4:], uint32(sec.Offset))
			bo.PutUint32(h[8:], 0)
			bo.PutUint32(h[12:], 0)
			bo.PutUint32(h[16:], uint32(sec.Size))
			bo.PutUint32(h[20:], 0)
			bo.PutUint32(h[28:], 4)
		}
		return nil
	}
	return fmt.Errorf("%s: no PT_NOTE program header to reuse", name)
}
