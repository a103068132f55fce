package usdt

import (
	"bytes"
	"cmp"
	"debug/elf"
	"fmt"
	"slices"

	"github.com/probekit/probekit/internal/safeelf"
)

// SiteKind is the instruction found at a location's file offset.
type SiteKind uint8

const (
	// SiteUnchecked: the site was not read, because the location's
	// address did not resolve (see Location.SiteErr).
	SiteUnchecked SiteKind = iota
	// SiteNop is the architecture's NOP, what sys/sdt.h emits.
	SiteNop
	// SiteNopNop5 is x86 "nop; nopl 0x0(%rax,%rax,1)" (90 0f 1f 44 00 00),
	// which libbpf/usdt emitted so that kernels with the uprobe syscall
	// can optimise the probe at +1 (reverted in libbpf/usdt b0144b0).
	SiteNopNop5
	// SiteNopNop10 is x86 "nop; nopw %cs:0x0(%rax,%rax,1)" (90 66 2e 0f
	// 1f 84 00 00 00 00 00), libbpf/usdt's current emission (9018f82).
	SiteNopNop10
	// SiteBad: the bytes are not a NOP (see Location.SiteErr).
	SiteBad
)

var siteNames = [...]string{
	SiteUnchecked: "unchecked",
	SiteNop:       "nop",
	SiteNopNop5:   "nop+nop5",
	SiteNopNop10:  "nop+nop10",
	SiteBad:       "bad",
}

func (s SiteKind) String() string {
	if int(s) < len(siteNames) {
		return siteNames[s]
	}
	return fmt.Sprintf("SiteKind(%d)", s)
}

// nop is one accepted encoding, as the bytes stored in the file.
type nop struct {
	code []byte
	site SiteKind
}

// maxSiteBytes is the longest encoding in nops (x86 nop+nop10).
const maxSiteBytes = 11

// nops lists the encodings probe producers emit, per machine, longest
// first (a longer match says more about the site). Each entry was checked
// against the testdata fixtures with objdump. Machines absent from the
// table cannot be checked, and their locations get a SiteError.
var nops = map[elf.Machine][]nop{
	elf.EM_X86_64: x86Nops,
	elf.EM_386:    x86Nops,
	// hint #0 "nop" (d503201f); A64 instructions are little-endian
	// whatever the data encoding.
	elf.EM_AARCH64: {{[]byte{0x1f, 0x20, 0x03, 0xd5}, SiteNop}},
	// ARM: A32 "nop" (e320f000) and the pre-v6K "mov r0, r0" (e1a00000);
	// Thumb-2 "nop" (bf00, what gcc emits for armhf) and Thumb-1 "mov r8,
	// r8" (46c0). Instructions are little-endian on BE8 and v7+ too.
	elf.EM_ARM: {
		{[]byte{0x00, 0xf0, 0x20, 0xe3}, SiteNop},
		{[]byte{0x00, 0x00, 0xa0, 0xe1}, SiteNop},
		{[]byte{0x00, 0xbf}, SiteNop},
		{[]byte{0xc0, 0x46}, SiteNop},
	},
	// s390x: "nop" assembles to "bc 0,0" (47000000); "nopr" is "bcr 0,%r0"
	// (0700). Big-endian only.
	elf.EM_S390: {
		{[]byte{0x47, 0x00, 0x00, 0x00}, SiteNop},
		{[]byte{0x07, 0x00}, SiteNop},
	},
	// RISC-V: "addi x0, x0, 0" (00000013) and, with the C extension that
	// every Linux distribution enables, "c.nop" (0001).
	elf.EM_RISCV: {
		{[]byte{0x13, 0x00, 0x00, 0x00}, SiteNop},
		{[]byte{0x01, 0x00}, SiteNop},
	},
	// Power: "ori 0,0,0" (60000000) in the file's byte order.
	elf.EM_PPC64: {
		{[]byte{0x60, 0x00, 0x00, 0x00}, SiteNop},
		{[]byte{0x00, 0x00, 0x00, 0x60}, SiteNop},
	},
	elf.EM_PPC: {
		{[]byte{0x60, 0x00, 0x00, 0x00}, SiteNop},
		{[]byte{0x00, 0x00, 0x00, 0x60}, SiteNop},
	},
	// LoongArch: "andi $r0, $r0, 0" (03400000), little-endian.
	elf.EM_LOONGARCH: {{[]byte{0x00, 0x00, 0x40, 0x03}, SiteNop}},
}

var x86Nops = []nop{
	{[]byte{0x90, 0x66, 0x2e, 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00}, SiteNopNop10},
	{[]byte{0x90, 0x0f, 0x1f, 0x44, 0x00, 0x00}, SiteNopNop5},
	{[]byte{0x90}, SiteNop},
}

// classify returns the SiteKind that code (the bytes at a location) starts
// with, and false when it starts with no NOP known for m. Only the
// encoding matching the file's byte order is accepted on Power, whose
// instructions follow it.
func classify(m elf.Machine, data elf.Data, code []byte) (SiteKind, bool, error) {
	list, ok := nops[m]
	if !ok {
		return SiteUnchecked, false, fmt.Errorf("no NOP encoding is known for %v", m)
	}
	for _, n := range list {
		if (m == elf.EM_PPC64 || m == elf.EM_PPC) && (n.code[0] == 0x60) != (data == elf.ELFDATA2MSB) {
			continue
		}
		if bytes.HasPrefix(code, n.code) {
			return n.site, true, nil
		}
	}
	return SiteBad, false, nil
}

// siteWindow bounds one coalesced read of probe sites. Sites cluster
// (libjvm.so's 531 lie in 28 windows of 16 KiB), and one read per window
// instead of one per site made listing libjvm.so 35% faster: syscalls are
// the cost, not bytes.
const siteWindow = 16 << 10

// siteRef is a location whose site is to be checked.
type siteRef struct {
	loc   *Location
	probe string
	seg   *safeelf.Prog
	n     uint64 // bytes to read: up to maxSiteBytes, within the segment's file part
}

// checkSites reads the bytes at each resolved location (SiteErr nil) and
// records what they are, reading nearby sites together.
func checkSites(f *safeelf.File, l *layout, probes []Probe) {
	total := 0
	for i := range probes {
		total += len(probes[i].Locations)
	}
	refs := make([]siteRef, 0, total)
	for pi := range probes {
		p := &probes[pi]
		name := p.String()
		for li := range p.Locations {
			loc := &p.Locations[li]
			if loc.SiteErr != nil {
				continue
			}
			seg := l.segmentOf(loc.Address)
			n := min(uint64(maxSiteBytes), seg.Filesz-(loc.Address-seg.Vaddr))
			refs = append(refs, siteRef{loc, name, seg, n})
		}
	}
	slices.SortFunc(refs, func(a, b siteRef) int { return cmp.Compare(a.loc.FileOffset, b.loc.FileOffset) })
	for i := 0; i < len(refs); {
		start := refs[i].loc.FileOffset
		end := start + refs[i].n
		j := i + 1
		for j < len(refs) && refs[j].loc.FileOffset+refs[j].n-start <= siteWindow {
			end = max(end, refs[j].loc.FileOffset+refs[j].n)
			j++
		}
		window, err := f.ReadAt(start, end-start, siteWindow)
		for _, r := range refs[i:j] {
			if err != nil {
				// Read the site alone for a precise error.
				checkSite(f, r.seg, r.probe, r.loc, nil)
				continue
			}
			off := r.loc.FileOffset - start
			checkSite(f, r.seg, r.probe, r.loc, window[off:off+r.n])
		}
		i = j
	}
}

// checkSite records what code (the bytes at loc's file offset, read here
// when nil) is.
func checkSite(f *safeelf.File, seg *safeelf.Prog, probe string, loc *Location, code []byte) {
	if code == nil {
		n := min(uint64(maxSiteBytes), seg.Filesz-(loc.Address-seg.Vaddr))
		var err error
		if code, err = f.ReadAt(loc.FileOffset, n, maxSiteBytes); err != nil {
			// The segment claims bytes the file does not have.
			loc.SiteErr = &SiteError{Probe: probe, Address: loc.Address, Segment: describe(seg), Reason: err.Error()}
			loc.Site = SiteBad
			return
		}
	}
	site, ok, why := classify(f.Machine, f.Data, code)
	loc.Site = site
	switch {
	case why != nil:
		loc.SiteErr = &SiteError{Probe: probe, Address: loc.Address, Segment: describe(seg), Reason: "cannot check the site: " + why.Error()}
	case !ok:
		shown := code[:min(len(code), 4)]
		loc.SiteErr = &SiteError{Probe: probe, Address: loc.Address, Segment: describe(seg),
			Reason: fmt.Sprintf("bytes % x at file offset %#x are not a %v NOP (the note or its address translation is wrong)", shown, loc.FileOffset, f.Machine)}
	}
}
