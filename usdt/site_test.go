package usdt

import (
	"debug/elf"
	"errors"
	"strings"
	"testing"
)

func TestClassify(t *testing.T) {
	for _, c := range []struct {
		m    elf.Machine
		data elf.Data
		code []byte
		want SiteKind
		ok   bool
	}{
		{elf.EM_X86_64, elf.ELFDATA2LSB, []byte{0x90, 0x55}, SiteNop, true},
		{elf.EM_X86_64, elf.ELFDATA2LSB, []byte{0x90, 0x0f, 0x1f, 0x44, 0x00, 0x00, 0xc3}, SiteNopNop5, true},
		{elf.EM_X86_64, elf.ELFDATA2LSB, []byte{0x90, 0x66, 0x2e, 0x0f, 0x1f, 0x84, 0, 0, 0, 0, 0}, SiteNopNop10, true},
		{elf.EM_X86_64, elf.ELFDATA2LSB, []byte{0x90, 0x66, 0x2e, 0x0f, 0x1f, 0x84, 0, 0, 0, 0}, SiteNop, true}, // cut nop10: still a nop
		{elf.EM_X86_64, elf.ELFDATA2LSB, []byte{0xcc}, SiteBad, false},
		{elf.EM_X86_64, elf.ELFDATA2LSB, []byte{0x0f, 0x1f, 0x44, 0x00, 0x00}, SiteBad, false}, // nop5 alone: not what sdt.h emits
		{elf.EM_386, elf.ELFDATA2LSB, []byte{0x90}, SiteNop, true},
		{elf.EM_AARCH64, elf.ELFDATA2LSB, []byte{0x1f, 0x20, 0x03, 0xd5}, SiteNop, true},
		{elf.EM_AARCH64, elf.ELFDATA2LSB, []byte{0xd5, 0x03, 0x20, 0x1f}, SiteBad, false},
		{elf.EM_ARM, elf.ELFDATA2LSB, []byte{0x00, 0xbf}, SiteNop, true},
		{elf.EM_ARM, elf.ELFDATA2LSB, []byte{0x00, 0xf0, 0x20, 0xe3}, SiteNop, true},
		{elf.EM_ARM, elf.ELFDATA2LSB, []byte{0x00, 0x00, 0xa0, 0xe1}, SiteNop, true},
		{elf.EM_ARM, elf.ELFDATA2LSB, []byte{0xc0, 0x46}, SiteNop, true},
		{elf.EM_ARM, elf.ELFDATA2LSB, []byte{0x70, 0x47}, SiteBad, false}, // bx lr
		{elf.EM_S390, elf.ELFDATA2MSB, []byte{0x47, 0x00, 0x00, 0x00}, SiteNop, true},
		{elf.EM_S390, elf.ELFDATA2MSB, []byte{0x07, 0x00}, SiteNop, true},
		{elf.EM_S390, elf.ELFDATA2MSB, []byte{0x07, 0xfe}, SiteBad, false}, // br %r14
		{elf.EM_RISCV, elf.ELFDATA2LSB, []byte{0x01, 0x00}, SiteNop, true},
		{elf.EM_RISCV, elf.ELFDATA2LSB, []byte{0x13, 0x00, 0x00, 0x00}, SiteNop, true},
		{elf.EM_RISCV, elf.ELFDATA2LSB, []byte{0x82, 0x80}, SiteBad, false}, // c.ret
		{elf.EM_PPC64, elf.ELFDATA2MSB, []byte{0x60, 0x00, 0x00, 0x00}, SiteNop, true},
		{elf.EM_PPC64, elf.ELFDATA2LSB, []byte{0x00, 0x00, 0x00, 0x60}, SiteNop, true},
		{elf.EM_PPC64, elf.ELFDATA2LSB, []byte{0x60, 0x00, 0x00, 0x00}, SiteBad, false}, // wrong order for ppc64le
		{elf.EM_PPC64, elf.ELFDATA2MSB, []byte{0x00, 0x00, 0x00, 0x60}, SiteBad, false},
		{elf.EM_LOONGARCH, elf.ELFDATA2LSB, []byte{0x00, 0x00, 0x40, 0x03}, SiteNop, true},
		{elf.EM_X86_64, elf.ELFDATA2LSB, nil, SiteBad, false},
	} {
		got, ok, err := classify(c.m, c.data, c.code)
		if got != c.want || ok != c.ok || err != nil {
			t.Errorf("classify(%v, % x) = %v, %v, %v; want %v, %v", c.m, c.code, got, ok, err, c.want, c.ok)
		}
	}
	if _, ok, err := classify(elf.EM_SPARCV9, elf.ELFDATA2MSB, []byte{1, 0, 0, 0}); ok || err == nil {
		t.Errorf("unknown machine: ok=%v err=%v", ok, err)
	}
}

// TestBadSite: an int3 planted at a probe's NOP makes that location, and
// only it, refuse to attach.
func TestBadSite(t *testing.T) {
	p := newPatch(t, "usdt_sample")
	orig := p.parse(t)
	target, err := orig.Find("sample", "inlined")
	if err != nil {
		t.Fatal(err)
	}
	bad := target.Locations[1]
	p.b[bad.FileOffset] = 0xcc
	f := p.parse(t)
	for _, pr := range f.Probes {
		for _, l := range pr.Locations {
			if l.Address != bad.Address {
				if l.SiteErr != nil || l.Site != SiteNop {
					t.Errorf("%s at %#x: %v %v", pr.String(), l.Address, l.Site, l.SiteErr)
				}
				continue
			}
			var se *SiteError
			if l.Site != SiteBad || !errors.Is(l.SiteErr, ErrBadSite) || !errors.As(l.SiteErr, &se) {
				t.Fatalf("bad site: %v %v", l.Site, l.SiteErr)
			}
			if se.Probe != "sample:inlined" || se.Address != bad.Address || !strings.Contains(se.Reason, "cc") {
				t.Errorf("SiteError %+v", se)
			}
		}
	}
}
