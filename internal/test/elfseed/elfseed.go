// Package elfseed builds minimal ELF files, 0.5-1.2 KiB each, one per
// kind of content the parsers read: notes, symbols, DWARF,
// compressed DWARF, call-frame information, a debug link and Go's
// function table. They seed the fuzz targets of whole files, which
// ran 1-3 executions a second from the fixtures of testdata/bin (14-70
// KiB) and run thousands from these (go test -fuzz, 20 s each on a
// shared 2-CPU machine; before: 40 s each):
//
//	                           before   after
//	safeelf FuzzSymbols           1.3   13,183
//	usdt FuzzFile                 1.8    8,882
//	debuginfo FuzzLinesELF        2.7    4,888
//	debuginfo FuzzFindObject      1.0    1,286
//	debuginfo FuzzFindDebugFile   2.4    1,094
//
// The last two also write each input to a file (FuzzFindObject's
// directory is made once per worker).
//
// The files are x86-64, little-endian ELF64: one PT_LOAD (read and
// execute) maps the whole file at Base, so a section's address is Base
// plus its file offset; a PT_NOTE covers the note sections. The bytes
// are laid out here from the formats (gABI, DWARF 4 §6.2 and §7.5, LSB
// 5.0 "Exception Frames", the stapsdt note layout), never copied from
// another tool's output.
package elfseed

import (
	"bytes"
	"compress/zlib"
	"debug/elf"
	"encoding/binary"
	"flag"
	"hash/crc32"
	"sort"
)

// Base is the address the file is mapped at (its first byte).
const Base = 0x400000

// textOff is where the first section (.text in every seed) starts:
// after the ELF header (64 bytes) and two program headers (56 each).
const textOff = 0xc0

// TextAddr is the address of the seeds' .text: two functions of 8
// bytes, f at TextAddr and g at TextAddr+8.
const TextAddr = Base + textOff

var le = binary.LittleEndian

// Section is one section of a file Build lays out.
type Section struct {
	Name    string
	Type    elf.SectionType
	Flags   elf.SectionFlag
	Data    []byte
	Link    uint32 // an index into the sections given, +1 (0: none)
	Info    uint32
	Entsize uint64
	Align   uint64
}

// Build lays out secs (the first at file offset 0xc0) after the ELF
// header and two program headers, then .shstrtab and the section
// headers.
func Build(secs ...Section) []byte {
	const ehsize, phsize, shsize = 64, 56, 64
	shstr := []byte{0}
	nameOff := make([]uint32, len(secs)+1)
	for i, s := range secs {
		nameOff[i] = uint32(len(shstr))
		shstr = append(append(shstr, s.Name...), 0)
	}
	nameOff[len(secs)] = uint32(len(shstr))
	shstr = append(shstr, ".shstrtab\x00"...)
	all := append(append([]Section{}, secs...), Section{Name: ".shstrtab", Type: elf.SHT_STRTAB, Data: shstr})

	buf := make([]byte, textOff)
	offs := make([]uint64, len(all))
	var noteStart, noteEnd uint64
	for i, s := range all {
		if a := s.Align; a > 1 {
			for uint64(len(buf))%a != 0 {
				buf = append(buf, 0)
			}
		}
		offs[i] = uint64(len(buf))
		if s.Type == elf.SHT_NOTE && s.Flags&elf.SHF_ALLOC != 0 {
			if noteStart == 0 {
				noteStart = offs[i]
			}
			noteEnd = offs[i] + uint64(len(s.Data))
		}
		if s.Type != elf.SHT_NOBITS {
			buf = append(buf, s.Data...)
		}
	}
	for len(buf)%8 != 0 {
		buf = append(buf, 0)
	}
	shoff := uint64(len(buf))
	buf = append(buf, make([]byte, shsize*(len(all)+1))...)

	copy(buf, elf.ELFMAG)
	buf[elf.EI_CLASS] = byte(elf.ELFCLASS64)
	buf[elf.EI_DATA] = byte(elf.ELFDATA2LSB)
	buf[elf.EI_VERSION] = byte(elf.EV_CURRENT)
	le.PutUint16(buf[16:], uint16(elf.ET_DYN))
	le.PutUint16(buf[18:], uint16(elf.EM_X86_64))
	le.PutUint32(buf[20:], uint32(elf.EV_CURRENT))
	le.PutUint64(buf[24:], TextAddr) // e_entry
	le.PutUint64(buf[32:], ehsize)   // e_phoff
	le.PutUint64(buf[40:], shoff)
	le.PutUint16(buf[52:], ehsize)
	le.PutUint16(buf[54:], phsize)
	le.PutUint16(buf[56:], 2)
	le.PutUint16(buf[58:], shsize)
	le.PutUint16(buf[60:], uint16(len(all)+1))
	le.PutUint16(buf[62:], uint16(len(all))) // .shstrtab, the last

	ph := buf[ehsize:]
	le.PutUint32(ph[0:], uint32(elf.PT_LOAD))
	le.PutUint32(ph[4:], uint32(elf.PF_R|elf.PF_X))
	le.PutUint64(ph[8:], 0)     // p_offset
	le.PutUint64(ph[16:], Base) // p_vaddr
	le.PutUint64(ph[24:], Base) // p_paddr
	le.PutUint64(ph[32:], shoff)
	le.PutUint64(ph[40:], shoff)
	le.PutUint64(ph[48:], 0x1000)
	ph = ph[phsize:]
	if noteStart != 0 {
		le.PutUint32(ph[0:], uint32(elf.PT_NOTE))
		le.PutUint32(ph[4:], uint32(elf.PF_R))
		le.PutUint64(ph[8:], noteStart)
		le.PutUint64(ph[16:], Base+noteStart)
		le.PutUint64(ph[24:], Base+noteStart)
		le.PutUint64(ph[32:], noteEnd-noteStart)
		le.PutUint64(ph[40:], noteEnd-noteStart)
		le.PutUint64(ph[48:], 4)
	} else {
		le.PutUint32(ph[0:], uint32(elf.PT_GNU_STACK))
		le.PutUint32(ph[4:], uint32(elf.PF_R|elf.PF_W))
	}

	for i, s := range all {
		sh := buf[shoff+uint64(shsize*(i+1)):]
		le.PutUint32(sh[0:], nameOff[i])
		le.PutUint32(sh[4:], uint32(s.Type))
		le.PutUint64(sh[8:], uint64(s.Flags))
		if s.Flags&elf.SHF_ALLOC != 0 {
			le.PutUint64(sh[16:], Base+offs[i])
		}
		le.PutUint64(sh[24:], offs[i])
		le.PutUint64(sh[32:], uint64(len(s.Data)))
		le.PutUint32(sh[40:], s.Link)
		le.PutUint32(sh[44:], s.Info)
		le.PutUint64(sh[48:], max(s.Align, 1))
		le.PutUint64(sh[56:], s.Entsize)
	}
	return buf
}

// text is .text: f and g, each endbr64-free "push %rbp; mov %rsp,%rbp;
// nop; pop %rbp; ret" padded with a nop to 8 bytes.
func text() Section {
	fn := []byte{0x55, 0x48, 0x89, 0xe5, 0x90, 0x5d, 0xc3, 0x90}
	return Section{Name: ".text", Type: elf.SHT_PROGBITS, Flags: elf.SHF_ALLOC | elf.SHF_EXECINSTR,
		Data: append(append([]byte{}, fn...), fn...), Align: 16}
}

// note is one ELF note (gABI "Note Section"), padded to 4 bytes.
func note(name string, typ uint32, desc []byte) []byte {
	b := le.AppendUint32(nil, uint32(len(name)+1))
	b = le.AppendUint32(b, uint32(len(desc)))
	b = le.AppendUint32(b, typ)
	b = append(append(b, name...), 0)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	b = append(b, desc...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// BuildID is the seeds' GNU build ID.
var BuildID = []byte{0xde, 0xad, 0xbe, 0xef, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x10}

func buildIDNote() Section {
	return Section{Name: ".note.gnu.build-id", Type: elf.SHT_NOTE, Flags: elf.SHF_ALLOC, Data: note("GNU", 3, BuildID), Align: 4}
}

// Notes is a file with a build ID and two USDT probes (.note.stapsdt,
// NT_STAPSDT 3: location, .stapsdt.base's address and the semaphore's,
// then provider, name and arguments), one with a semaphore.
func Notes() []byte {
	base := uint64(TextAddr + 16) // .stapsdt.base follows .text's 16 bytes
	probe := func(loc, sema uint64, provider, name, args string) []byte {
		d := le.AppendUint64(nil, loc)
		d = le.AppendUint64(d, base)
		d = le.AppendUint64(d, sema)
		d = append(append(d, provider...), 0)
		d = append(append(d, name...), 0)
		return append(append(d, args...), 0)
	}
	stap := append(note("stapsdt", 3, probe(TextAddr+4, 0, "seed", "plain", "8@%rdi -4@8(%rsp)")),
		note("stapsdt", 3, probe(TextAddr+12, base+1, "seed", "gated", "8@%rax"))...)
	return Build(text(),
		Section{Name: ".stapsdt.base", Type: elf.SHT_PROGBITS, Flags: elf.SHF_ALLOC, Data: []byte{0, 0, 0}},
		buildIDNote(),
		Section{Name: ".note.stapsdt", Type: elf.SHT_NOTE, Data: stap, Align: 4},
	)
}

// symtab is a symbol table of f and g (global functions in .text,
// section 1) and a local object, with its string table at index link.
func symtab(name string, typ elf.SectionType, link uint32) (Section, Section) {
	strs := []byte("\x00f\x00g\x00local\x00")
	sym := func(b []byte, name uint32, info byte, shndx uint16, value, size uint64) []byte {
		b = le.AppendUint32(b, name)
		b = append(b, info, 0)
		b = le.AppendUint16(b, shndx)
		b = le.AppendUint64(b, value)
		return le.AppendUint64(b, size)
	}
	b := sym(nil, 0, 0, 0, 0, 0)
	b = sym(b, 5, byte(elf.STB_LOCAL)<<4|byte(elf.STT_OBJECT), 1, TextAddr, 1)
	b = sym(b, 1, byte(elf.STB_GLOBAL)<<4|byte(elf.STT_FUNC), 1, TextAddr, 8)
	b = sym(b, 3, byte(elf.STB_GLOBAL)<<4|byte(elf.STT_FUNC), 1, TextAddr+8, 8)
	strName := ".strtab"
	if typ == elf.SHT_DYNSYM {
		strName = ".dynstr"
	}
	return Section{Name: name, Type: typ, Data: b, Link: link, Info: 2, Entsize: 24, Align: 8},
		Section{Name: strName, Type: elf.SHT_STRTAB, Data: strs}
}

// Symbols is a file with .symtab and .dynsym, each naming f and g.
func Symbols() []byte {
	sym, str := symtab(".symtab", elf.SHT_SYMTAB, 3)
	dsym, dstr := symtab(".dynsym", elf.SHT_DYNSYM, 5)
	dsym.Flags, dstr.Flags = elf.SHF_ALLOC, elf.SHF_ALLOC
	return Build(text(), sym, str, dsym, dstr)
}

// dwarf4 are the .debug_abbrev, .debug_info and .debug_line of one
// compile unit, a.c, with f and g and a line table of three rows.
func dwarf4() (abbrev, info, line []byte) {
	abbrev = []byte{
		1, 0x11, 1, // compile_unit, children
		0x03, 0x08, 0x11, 0x01, 0x12, 0x06, 0x10, 0x17, 0x13, 0x0b, 0, 0, // name string, low_pc addr, high_pc data4, stmt_list sec_offset, language data1
		2, 0x2e, 0, // subprogram, no children
		0x03, 0x08, 0x11, 0x01, 0x12, 0x06, 0x3f, 0x19, 0, 0, // name, low_pc, high_pc, external flag_present
		0,
	}
	var d []byte
	d = append(d, 1)
	d = append(d, "a.c\x00"...)
	d = le.AppendUint64(d, TextAddr)
	d = le.AppendUint32(d, 16)
	d = le.AppendUint32(d, 0)
	d = append(d, 0x0c) // DW_LANG_C99
	for i, n := range []string{"f", "g"} {
		d = append(d, 2)
		d = append(append(d, n...), 0)
		d = le.AppendUint64(d, TextAddr+8*uint64(i))
		d = le.AppendUint32(d, 8)
	}
	d = append(d, 0)
	info = le.AppendUint32(nil, uint32(2+4+1+len(d)))
	info = le.AppendUint16(info, 4)
	info = le.AppendUint32(info, 0) // .debug_abbrev offset
	info = append(info, 8)
	info = append(info, d...)

	hdr := []byte{1, 1, 1, 0xfb, 14, 13, 0, 1, 1, 1, 1, 0, 0, 0, 1, 0, 0, 1} // min_inst, max_ops, default_is_stmt, line_base -5, line_range, opcode_base, standard_opcode_lengths
	hdr = append(hdr, 0)                                                     // no include directories
	hdr = append(hdr, "a.c\x00"...)
	hdr = append(hdr, 0, 0, 0, 0) // directory, mtime, length; end of files
	prog := []byte{0, 9, 2}       // DW_LNE_set_address
	prog = le.AppendUint64(prog, TextAddr)
	prog = append(prog, 0x03, 2, 0x01)          // advance_line 2 (line 3), copy
	prog = append(prog, 75)                     // special: address +4, line +1
	prog = append(prog, 0x02, 4, 0x03, 1, 0x01) // advance_pc 4 (g), advance_line 1 (line 5), copy
	prog = append(prog, 0x02, 8, 0, 1, 1)
	body := le.AppendUint16(nil, 4)
	body = le.AppendUint32(body, uint32(len(hdr)))
	body = append(body, hdr...)
	body = append(body, prog...)
	line = le.AppendUint32(nil, uint32(len(body)))
	line = append(line, body...)
	return abbrev, info, line
}

// DWARF is a file with DWARF 4 for f and g, and their symbols.
func DWARF() []byte {
	abbrev, info, line := dwarf4()
	sym, str := symtab(".symtab", elf.SHT_SYMTAB, 6)
	return Build(text(), buildIDNote(),
		Section{Name: ".debug_abbrev", Type: elf.SHT_PROGBITS, Data: abbrev},
		Section{Name: ".debug_info", Type: elf.SHT_PROGBITS, Data: info},
		Section{Name: ".debug_line", Type: elf.SHT_PROGBITS, Data: line},
		sym, str)
}

func deflate(b []byte) []byte {
	var z bytes.Buffer
	w := zlib.NewWriter(&z)
	w.Write(b)
	w.Close()
	return z.Bytes()
}

// Compressed is DWARF's file with .debug_info compressed the gABI way
// (SHF_COMPRESSED, an Elf64_Chdr of ELFCOMPRESS_ZLIB) and .debug_line
// the older way (.zdebug_line: "ZLIB", the size big-endian, zlib).
func Compressed() []byte {
	abbrev, info, line := dwarf4()
	chdr := le.AppendUint32(nil, uint32(elf.COMPRESS_ZLIB))
	chdr = le.AppendUint32(chdr, 0)
	chdr = le.AppendUint64(chdr, uint64(len(info)))
	chdr = le.AppendUint64(chdr, 1)
	zline := binary.BigEndian.AppendUint64([]byte("ZLIB"), uint64(len(line)))
	return Build(text(), buildIDNote(),
		Section{Name: ".debug_abbrev", Type: elf.SHT_PROGBITS, Data: abbrev},
		Section{Name: ".debug_info", Type: elf.SHT_PROGBITS, Flags: elf.SHF_COMPRESSED, Data: append(chdr, deflate(info)...), Align: 8},
		Section{Name: ".zdebug_line", Type: elf.SHT_PROGBITS, Data: append(zline, deflate(line)...)})
}

// EHFrame is an .eh_frame at addr: one "zR" CIE (pc-relative sdata4
// addresses; CFA = rsp+8, the return address at CFA-8) and an FDE for
// f (CFA = rsp+16 after its push, rbp at CFA-16) and one for g, then
// the terminator.
func EHFrame(addr uint64) []byte {
	cie := []byte{0, 0, 0, 0, 1, 'z', 'R', 0, 1, 0x78, 16, 1, 0x1b, 0x0c, 7, 8, 0x90, 1, 0, 0}
	b := le.AppendUint32(nil, uint32(len(cie)))
	b = append(b, cie...)
	for i := range 2 {
		at := len(b)
		body := le.AppendUint32(nil, uint32(at+4)) // back to the CIE
		pc := TextAddr + 8*uint64(i)
		body = le.AppendUint32(body, uint32(int32(int64(pc)-int64(addr+uint64(at)+8)))) // pcrel to this field
		body = le.AppendUint32(body, 8)
		body = append(body, 0, 0x41, 0x0e, 16, 0x86, 2, 0, 0) // no augmentation data; advance 1, CFA offset 16, rbp at CFA-16; two nops
		b = le.AppendUint32(b, uint32(len(body)))
		b = append(b, body...)
	}
	return le.AppendUint32(b, 0)
}

// CFI is a file with .eh_frame for f and g.
func CFI() []byte {
	// .eh_frame follows .text's 16 bytes, 8-aligned.
	return Build(text(), Section{Name: ".eh_frame", Type: elf.SHT_PROGBITS, Flags: elf.SHF_ALLOC, Data: EHFrame(TextAddr + 16), Align: 8})
}

// DebugLink is a file whose .gnu_debuglink names name with the CRC-32
// of debug.
func DebugLink(name string, debug []byte) []byte {
	d := append([]byte(name), 0)
	for len(d)%4 != 0 {
		d = append(d, 0)
	}
	d = le.AppendUint32(d, crc32.ChecksumIEEE(debug))
	return Build(text(), buildIDNote(), Section{Name: ".gnu_debuglink", Type: elf.SHT_PROGBITS, Data: d, Align: 4})
}

// GoTable is a file with a Go 1.20 .gopclntab of two functions, main.f
// and main.g over .text (the layouts of Go's runtime/symtab.go:
// pcHeader, functab and _func).
func GoTable() []byte {
	const hdrSize = 8 + 8*8
	names := []byte("main.f\x00main.g\x00")
	files := []byte("a.go\x00")
	cu := le.AppendUint32(nil, 0) // the file of cu 0
	pctab := []byte{0, 2, 16, 0}  // one entry: value 0 (zigzag +1 for line), then end
	// functab: entryoff, funcoff pairs, then the end's entryoff.
	const funcSize = 44
	ftab := le.AppendUint32(nil, 0)
	ftab = le.AppendUint32(ftab, 3*8-4)
	ftab = le.AppendUint32(ftab, 8)
	ftab = le.AppendUint32(ftab, 3*8-4+funcSize)
	ftab = le.AppendUint32(ftab, 16)
	fn := func(entry uint32, name int32) []byte {
		b := le.AppendUint32(nil, entry)
		b = le.AppendUint32(b, uint32(name))
		b = le.AppendUint32(b, 0)    // args
		b = le.AppendUint32(b, 0)    // deferreturn
		b = le.AppendUint32(b, 1)    // pcsp
		b = le.AppendUint32(b, 1)    // pcfile
		b = le.AppendUint32(b, 1)    // pcln
		b = le.AppendUint32(b, 0)    // npcdata
		b = le.AppendUint32(b, 0)    // cuOffset
		b = le.AppendUint32(b, 3)    // startLine
		return append(b, 0, 0, 0, 0) // funcID, flag, pad, nfuncdata
	}
	funcdata := append(ftab, fn(0, 0)...)
	funcdata = append(funcdata, fn(8, 7)...)
	off := uint64(hdrSize)
	hdr := le.AppendUint32(nil, 0xfffffff1)
	hdr = append(hdr, 0, 0, 1, 8)
	hdr = le.AppendUint64(hdr, 2) // nfunc
	hdr = le.AppendUint64(hdr, 1) // nfiles
	hdr = le.AppendUint64(hdr, TextAddr)
	var body []byte
	for _, part := range [][]byte{names, cu, files, pctab, funcdata} {
		hdr = le.AppendUint64(hdr, off+uint64(len(body)))
		body = append(body, part...)
	}
	return Build(text(), Section{Name: ".gopclntab", Type: elf.SHT_PROGBITS, Flags: elf.SHF_ALLOC, Data: append(hdr, body...), Align: 8})
}

// All are the seeds by name.
func All() map[string][]byte {
	d := DWARF()
	return map[string][]byte{
		"notes": Notes(), "symbols": Symbols(), "dwarf": d, "compressed": Compressed(),
		"cfi": CFI(), "debuglink": DebugLink("seed.debug", d), "go": GoTable(),
	}
}

// Each calls add with every seed, in name order.
func Each(add func(name string, data []byte)) {
	all := All()
	names := make([]string, 0, len(all))
	for n := range all {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		add(n, all[n])
	}
}

// Fuzzing reports whether the test binary runs a fuzz target (go test
// -fuzz): targets then seed with these files alone, and add the
// fixtures of testdata whole only when their seeds run as the plain
// tests they also are.
func Fuzzing() bool {
	f := flag.Lookup("test.fuzz")
	return f != nil && f.Value.String() != ""
}
