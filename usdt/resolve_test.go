package usdt

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"os"
	"testing"

	"github.com/probekit/probekit/internal/test/testkit"
)

// elfPatch is a writable copy of a little-endian ELF64 fixture with the
// offsets of its headers.
type elfPatch struct {
	b     []byte
	ef    *elf.File
	phoff uint64
	shoff uint64
}

func newPatch(t *testing.T, name string) *elfPatch {
	t.Helper()
	b, err := os.ReadFile(testkit.Fixture(name))
	if err != nil {
		t.Fatal(err)
	}
	ef, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ef.Close() })
	if ef.Class != elf.ELFCLASS64 || ef.Data != elf.ELFDATA2LSB {
		t.Fatal("patches need a little-endian ELF64 fixture")
	}
	le := binary.LittleEndian
	return &elfPatch{b: b, ef: ef, phoff: le.Uint64(b[32:]), shoff: le.Uint64(b[40:])}
}

// shiftLoads moves every PT_LOAD's p_vaddr (and p_paddr) by delta.
func (p *elfPatch) shiftLoads(delta uint64) {
	le := binary.LittleEndian
	for i, prog := range p.ef.Progs {
		if prog.Type != elf.PT_LOAD {
			continue
		}
		h := p.b[p.phoff+uint64(i)*56:]
		le.PutUint64(h[16:], prog.Vaddr+delta)
		le.PutUint64(h[24:], prog.Paddr+delta)
	}
}

// section returns the file offset of section name's header.
func (p *elfPatch) section(t *testing.T, name string) uint64 {
	for i, s := range p.ef.Sections {
		if s.Name == name {
			return p.shoff + uint64(i)*64
		}
	}
	t.Fatalf("no section %s", name)
	return 0
}

func (p *elfPatch) parse(t *testing.T) *File {
	t.Helper()
	f, err := Parse(bytes.NewReader(p.b))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestPrelink synthesises what prelink does to a file: sections and
// segments move by delta, notes stay. Locations and semaphores move with
// them; file offsets do not change.
func TestPrelink(t *testing.T) {
	const delta = 0x7f0000
	le := binary.LittleEndian
	orig := newPatch(t, "usdt_sample").parse(t)
	g := loadGolden(t, "usdt_sample")

	p := newPatch(t, "usdt_sample")
	p.shiftLoads(delta)
	base := p.section(t, ".stapsdt.base")
	le.PutUint64(p.b[base+16:], le.Uint64(p.b[base+16:])+delta)
	f := p.parse(t)

	sema := 0
	for i, pr := range f.Probes {
		for j, l := range pr.Locations {
			o := orig.Probes[i].Locations[j]
			if l.SiteErr != nil {
				t.Fatalf("%s: %v", pr.String(), l.SiteErr)
			}
			if l.Address != o.Address+delta || l.FileOffset != o.FileOffset || l.Base != o.Base {
				t.Errorf("%s: address %#x offset %#x base %#x, want %#x %#x %#x", pr.String(), l.Address, l.FileOffset, l.Base, o.Address+delta, o.FileOffset, o.Base)
			}
			if o.Semaphore != 0 {
				sema++
				if l.Semaphore != o.Semaphore+delta || l.SemaphoreOffset != o.SemaphoreOffset {
					t.Errorf("%s: semaphore %#x offset %#x, want %#x %#x", pr.String(), l.Semaphore, l.SemaphoreOffset, o.Semaphore+delta, o.SemaphoreOffset)
				}
			}
		}
	}
	if sema == 0 {
		t.Fatal("fixture has no semaphore to check")
	}
	// The unshifted file equals the golden, so the shifted one is the
	// golden plus delta.
	checkAgainstGolden(t, orig, g)
}

// TestPrelinkGuards: the delta applies only when both the section address
// and the note's base are non-zero (libbpf 69d85c5f).
func TestPrelinkGuards(t *testing.T) {
	le := binary.LittleEndian
	orig := newPatch(t, "usdt_sample").parse(t)
	same := func(t *testing.T, f *File) {
		t.Helper()
		for i, pr := range f.Probes {
			for j, l := range pr.Locations {
				o := orig.Probes[i].Locations[j]
				if l.Address != o.Address || l.Semaphore != o.Semaphore || l.FileOffset != o.FileOffset {
					t.Errorf("%s moved: %#x/%#x, was %#x/%#x", pr.String(), l.Address, l.Semaphore, o.Address, o.Semaphore)
				}
			}
		}
	}
	t.Run("section address zero", func(t *testing.T) {
		p := newPatch(t, "usdt_sample")
		le.PutUint64(p.b[p.section(t, ".stapsdt.base")+16:], 0)
		same(t, p.parse(t))
	})
	t.Run("section absent", func(t *testing.T) {
		p := newPatch(t, "usdt_sample")
		// Moving .stapsdt.base and renaming it: without the guard every
		// probe would move.
		h := p.section(t, ".stapsdt.base")
		le.PutUint64(p.b[h+16:], le.Uint64(p.b[h+16:])+0x1000)
		le.PutUint32(p.b[h:], 0) // sh_name -> ""
		same(t, p.parse(t))
	})
	t.Run("note base zero", func(t *testing.T) {
		p := newPatch(t, "usdt_sample")
		h := p.section(t, ".stapsdt.base")
		le.PutUint64(p.b[h+16:], le.Uint64(p.b[h+16:])+0x1000)
		// Zero the base of every note: desc starts 20 bytes into each.
		sec := p.ef.Section(".note.stapsdt")
		data := p.b[sec.Offset : sec.Offset+sec.Size]
		for pos := uint64(0); pos < uint64(len(data)); {
			namesz, descsz := uint64(le.Uint32(data[pos:])), uint64(le.Uint32(data[pos+4:]))
			desc := pos + 12 + alignUp(namesz, 4)
			le.PutUint64(data[desc+8:], 0)
			pos = desc + alignUp(descsz, 4)
		}
		f := p.parse(t)
		same(t, f)
		if f.Probes[0].Locations[0].Base != 0 {
			t.Error("base not zeroed")
		}
	})
}

// TestSegmentChecks: a probe outside executable code, or a semaphore in
// code, is a SiteError naming the probe, address and segment.
func TestSegmentChecks(t *testing.T) {
	le := binary.LittleEndian
	for _, c := range []struct {
		name   string
		patch  func(p *elfPatch)
		probe  string
		reason string
	}{
		{"text not executable", func(p *elfPatch) {
			for i, prog := range p.ef.Progs {
				if prog.Type == elf.PT_LOAD && prog.Flags&elf.PF_X != 0 {
					le.PutUint32(p.b[p.phoff+uint64(i)*56+4:], uint32(elf.PF_R))
				}
			}
		}, "sample:zero", "non-executable segment"},
		{"data executable", func(p *elfPatch) {
			for i, prog := range p.ef.Progs {
				if prog.Type == elf.PT_LOAD && prog.Flags&elf.PF_W != 0 {
					le.PutUint32(p.b[p.phoff+uint64(i)*56+4:], uint32(elf.PF_R|elf.PF_W|elf.PF_X))
				}
			}
		}, "sample:sema", "lies in an executable segment"},
		{"no segments", func(p *elfPatch) {
			for i, prog := range p.ef.Progs {
				if prog.Type == elf.PT_LOAD {
					le.PutUint32(p.b[p.phoff+uint64(i)*56:], uint32(elf.PT_NULL))
				}
			}
		}, "sample:zero", "not in the file's loaded image"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := newPatch(t, "usdt_sample")
			c.patch(p)
			f := p.parse(t)
			pr, err := f.Find("sample", c.probe[len("sample:"):])
			if err != nil {
				t.Fatal(err)
			}
			err = pr.Locations[0].SiteErr
			var se *SiteError
			if !errors.Is(err, ErrBadSite) || !errors.As(err, &se) {
				t.Fatalf("SiteErr = %v", err)
			}
			if se.Probe != c.probe || se.Address != pr.Locations[0].Address || !bytes.Contains([]byte(se.Reason), []byte(c.reason)) {
				t.Errorf("SiteError %+v, want probe %s reason %q", se, c.probe, c.reason)
			}
			t.Log(err)
		})
	}
}
