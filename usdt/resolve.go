package usdt

import (
	"bytes"
	"debug/elf"
	"fmt"

	"github.com/probekit/probekit/internal/safeelf"
)

// addressing is what address translation needs from the file: its loadable
// segments and the prelink delta.
type addressing struct {
	loads safeelf.Segments
	// stapsdtBase is the address of the .stapsdt.base section, 0 when the
	// file has none (or no section headers).
	stapsdtBase uint64
	// addrMask truncates address arithmetic to the file's address size.
	addrMask uint64
}

func newAddressing(f *safeelf.File) addressing {
	l := addressing{loads: f.Loads(), addrMask: ^uint64(0)}
	if f.Class == elf.ELFCLASS32 {
		l.addrMask = 0xffffffff
	}
	if s := f.Section(".stapsdt.base"); s != nil {
		l.stapsdtBase = s.Addr
	}
	return l
}

// prelinkDelta is how far prelink moved the file since the note was
// written: prelink changes section addresses but not note contents, and
// the note's base recorded where .stapsdt.base was at link time
// (sourceware.org/systemtap/wiki/UserSpaceProbeImplementation). Applied
// only when both are non-zero: a zeroed note base with the section kept
// (libbpf/usdt#5) or a non-zero base with the section garbage-collected
// (oxidecomputer/usdt#449) would otherwise shift probes onto unrelated
// code and semaphores onto unrelated data (libbpf 69d85c5f).
func (l *addressing) prelinkDelta(noteBase uint64) uint64 {
	if l.stapsdtBase == 0 || noteBase == 0 {
		return 0
	}
	return (l.stapsdtBase - noteBase) & l.addrMask
}

// segmentOf returns the PT_LOAD whose memory image [p_vaddr, p_vaddr+p_memsz)
// holds addr (see safeelf.Segments: no single delta serves the file).
func (l *addressing) segmentOf(addr uint64) *safeelf.Prog { return l.loads.Containing(addr) }

// describe names a segment for errors: "LOAD [0x1000,0x1ac5) R E".
func describe(p *safeelf.Prog) string {
	if p == nil {
		return "in no PT_LOAD segment"
	}
	flags := []byte("   ")
	if p.Flags&elf.PF_R != 0 {
		flags[0] = 'R'
	}
	if p.Flags&elf.PF_W != 0 {
		flags[1] = 'W'
	}
	if p.Flags&elf.PF_X != 0 {
		flags[2] = 'E'
	}
	return fmt.Sprintf("LOAD [%#x,%#x) offset %#x %s", p.Vaddr, p.Vaddr+p.Memsz, p.Off, bytes.TrimRight(flags, " "))
}

// resolve fills loc's file offsets from its addresses. The probe must be
// in an executable segment and inside the part backed by the file (a
// uprobe is set on a file offset, and the site is checked there); the
// semaphore must be in a non-executable one (libbpf collect_usdt_targets
// enforces the same). A failure is recorded in loc.SiteErr.
func (l *addressing) resolve(p *Probe, loc *Location) {
	seg := l.segmentOf(loc.Address)
	switch {
	case seg == nil:
		loc.SiteErr = &SiteError{Probe: p.String(), Address: loc.Address, Segment: describe(nil), Reason: "the address is not in the file's loaded image"}
		return
	case seg.Flags&elf.PF_X == 0:
		loc.SiteErr = &SiteError{Probe: p.String(), Address: loc.Address, Segment: describe(seg), Reason: "the probe lies in a non-executable segment"}
		return
	case loc.Address-seg.Vaddr >= seg.Filesz:
		loc.SiteErr = &SiteError{Probe: p.String(), Address: loc.Address, Segment: describe(seg), Reason: "the probe lies in the zero-filled tail of its segment, not in the file"}
		return
	}
	// off = a - p_vaddr + p_offset, in the containing segment.
	loc.FileOffset, _ = l.loads.CodeOffset(loc.Address)

	if loc.Semaphore == 0 {
		return
	}
	sseg := l.segmentOf(loc.Semaphore)
	switch {
	case sseg == nil:
		loc.SiteErr = &SiteError{Probe: p.String(), Address: loc.Address, Segment: describe(nil), Reason: fmt.Sprintf("semaphore %#x is not in the file's loaded image", loc.Semaphore)}
		return
	case sseg.Flags&elf.PF_X != 0:
		loc.SiteErr = &SiteError{Probe: p.String(), Address: loc.Address, Segment: describe(sseg), Reason: fmt.Sprintf("semaphore %#x lies in an executable segment", loc.Semaphore)}
		return
	}
	// Same derivation as the probe. A semaphore in the zero-filled tail
	// is accepted, as libbpf does: the kernel finds it by file offset
	// within the segment's mapping.
	loc.SemaphoreOffset, _ = l.loads.DataOffset(loc.Semaphore)
}
