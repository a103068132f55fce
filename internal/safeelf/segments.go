package safeelf

import "debug/elf"

// Segments are the PT_LOAD program headers of a file, in file order: the
// memory image the dynamic loader maps. They translate between link-time
// virtual addresses (symbol values, note locations) and file offsets
// (what uprobes take). Every segment is searched: linkers emit several
// PT_LOADs with different vaddr-offset deltas (one per permission since
// binutils 2.31's -z separate-code, libbpf/libbpf-bootstrap#90), so no
// single delta serves the whole file.
type Segments []Prog

// Loads returns the PT_LOAD program headers of f.
func (f *File) Loads() Segments {
	var s Segments
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			s = append(s, p)
		}
	}
	return s
}

// Containing returns the first segment whose memory image
// [p_vaddr, p_vaddr+p_memsz) holds vaddr, or nil.
func (s Segments) Containing(vaddr uint64) *Prog {
	for i := range s {
		p := &s[i]
		if vaddr >= p.Vaddr && vaddr-p.Vaddr < p.Memsz {
			return p
		}
	}
	return nil
}

// CodeOffset translates the address of code into its file offset:
// off = vaddr - p_vaddr + p_offset of the segment holding it (gABI,
// "Program Header"). The segment must be executable and the address
// backed by the file (below p_filesz): there is no code to probe in the
// zero-filled tail.
func (s Segments) CodeOffset(vaddr uint64) (uint64, bool) {
	p := s.Containing(vaddr)
	if p == nil || p.Flags&elf.PF_X == 0 || vaddr-p.Vaddr >= p.Filesz {
		return 0, false
	}
	return vaddr - p.Vaddr + p.Off, true
}

// DataOffset translates the address of data (a USDT semaphore) into its
// file offset through the non-executable segment holding it. An address
// in the zero-filled tail (.bss) is accepted: the kernel finds such a
// counter by its offset within the segment's mapping.
func (s Segments) DataOffset(vaddr uint64) (uint64, bool) {
	p := s.Containing(vaddr)
	if p == nil || p.Flags&elf.PF_X != 0 {
		return 0, false
	}
	return vaddr - p.Vaddr + p.Off, true
}

// Address translates a file offset back into a link-time virtual
// address through the first segment whose file image
// [p_offset, p_offset+p_filesz) holds it: vaddr = off - p_offset + p_vaddr.
// With exec set only executable segments qualify (a code offset from a
// stack trace or a uprobe).
func (s Segments) Address(off uint64, exec bool) (uint64, bool) {
	for i := range s {
		p := &s[i]
		if exec && p.Flags&elf.PF_X == 0 {
			continue
		}
		if off >= p.Off && off-p.Off < p.Filesz {
			return off - p.Off + p.Vaddr, true
		}
	}
	return 0, false
}
