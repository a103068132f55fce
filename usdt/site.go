package usdt

import (
	"bytes"
	"cmp"
	"debug/elf"
	"encoding/binary"
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
	// SiteNop is one NOP instruction of the architecture, in any of its
	// encodings (sys/sdt.h emits the assembler's "nop"; x86 also takes
	// 66 90 and 0f 1f /0 with any operand and prefixes, such as the
	// 5-byte 0f 1f 44 00 00). Location.SiteLength is its length.
	SiteNop
	// SiteNopNop5 is x86 "nop; nopl 0x0(%rax,%rax,1)" (90 0f 1f 44 00 00),
	// which libbpf/usdt emitted so that kernels with the uprobe syscall
	// can optimise the probe at +1 (reverted in libbpf/usdt b0144b0).
	SiteNopNop5
	// SiteNopNop10 is x86 "nop; nopw %cs:0x0(%rax,%rax,1)" (90 66 2e 0f
	// 1f 84 00 00 00 00 00), libbpf/usdt's current emission (9018f82).
	SiteNopNop10
	// SiteBad: the bytes are not a NOP (see Location.SiteErr). A NOP the
	// kernel cannot probe keeps its kind, with a SiteErr.
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

// maxSiteBytes is how much of a site is read: the longest x86
// instruction, 15 bytes (Intel SDM vol. 2, "Instruction Format"), longer
// than the x86 nop+nop10 pair (11) and than any other architecture's NOP.
const maxSiteBytes = 15

// classify says what code (the bytes at a location, up to maxSiteBytes)
// starts with on machine m, and how many bytes it takes: SiteBad and 0
// when it is no NOP, SiteUnchecked and an error when no NOP is known for
// m.
func classify(m elf.Machine, data elf.Data, code []byte) (SiteKind, int, error) {
	decode, ok := nopDecoders[m]
	if !ok {
		return SiteUnchecked, 0, fmt.Errorf("no NOP encoding is known for %v", m)
	}
	var order binary.ByteOrder = binary.LittleEndian
	if data == elf.ELFDATA2MSB {
		order = binary.BigEndian
	}
	n := decode(code, order)
	if n == 0 {
		return SiteBad, 0, nil
	}
	if (m == elf.EM_X86_64 || m == elf.EM_386) && code[0] == 0x90 {
		switch {
		case bytes.HasPrefix(code[1:], x86Nop10):
			return SiteNopNop10, 1 + len(x86Nop10), nil
		case bytes.HasPrefix(code[1:], x86Nop5):
			return SiteNopNop5, 1 + len(x86Nop5), nil
		}
	}
	return SiteNop, n, nil
}

// uprobeRefuses returns why the kernel will not place a uprobe on code, a
// NOP site of machine m, or "" when it will.
func uprobeRefuses(m elf.Machine, code []byte) string {
	switch m {
	case elf.EM_X86_64:
		return x86UprobeRefuses(code, 64)
	case elf.EM_386:
		return x86UprobeRefuses(code, 32)
	}
	return ""
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
func checkSites(f *safeelf.File, l *addressing, probes []Probe) {
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
	site, n, why := classify(f.Machine, f.Data, code)
	loc.Site, loc.SiteLength = site, n
	switch {
	case why != nil:
		loc.SiteErr = &SiteError{Probe: probe, Address: loc.Address, Segment: describe(seg), Reason: "cannot check the site: " + why.Error()}
	case site == SiteBad:
		shown := code[:min(len(code), 4)]
		loc.SiteErr = &SiteError{Probe: probe, Address: loc.Address, Segment: describe(seg),
			Reason: fmt.Sprintf("bytes % x at file offset %#x are not a %v NOP (the note or its address translation is wrong)", shown, loc.FileOffset, f.Machine)}
	default:
		if refused := uprobeRefuses(f.Machine, code); refused != "" {
			loc.SiteErr = &SiteError{Probe: probe, Address: loc.Address, Segment: describe(seg),
				Reason: fmt.Sprintf("bytes % x at file offset %#x: %s", code[:n], loc.FileOffset, refused)}
		}
	}
}
