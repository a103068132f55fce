package usdt

import (
	"debug/elf"
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/probekit/probekit/internal/test/testkit"
)

// hexBytes decodes "0f 1f 44 00 00".
func hexBytes(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return b
}

// TestClassify: every NOP form of each architecture is accepted with its
// length, and what is not a NOP is refused. Encodings are as stored in
// the file, checked against objdump (binutils 2.40) where it knows the
// architecture.
func TestClassify(t *testing.T) {
	const (
		le = elf.ELFDATA2LSB
		be = elf.ELFDATA2MSB
	)
	for _, c := range []struct {
		m    elf.Machine
		data elf.Data
		code string
		want SiteKind
		n    int
		what string
	}{
		// x86-64
		{elf.EM_X86_64, le, "90 55", SiteNop, 1, "nop"},
		{elf.EM_X86_64, le, "66 90", SiteNop, 2, "xchg %ax,%ax"},
		{elf.EM_X86_64, le, "48 90", SiteNop, 2, "rex.W nop"},
		{elf.EM_X86_64, le, "0f 1f 00", SiteNop, 3, "nopl (%rax)"},
		{elf.EM_X86_64, le, "0f 1f 40 00", SiteNop, 4, "nopl 0x0(%rax)"},
		{elf.EM_X86_64, le, "0f 1f 44 00 00 c3", SiteNop, 5, "nopl 0x0(%rax,%rax,1): a bare nop5"},
		{elf.EM_X86_64, le, "66 0f 1f 44 00 00", SiteNop, 6, "nopw 0x0(%rax,%rax,1)"},
		{elf.EM_X86_64, le, "0f 1f 80 00 00 00 00", SiteNop, 7, "nopl 0x0(%rax)"},
		{elf.EM_X86_64, le, "0f 1f 84 00 00 00 00 00", SiteNop, 8, "nopl 0x0(%rax,%rax,1)"},
		{elf.EM_X86_64, le, "66 0f 1f 84 00 00 00 00 00", SiteNop, 9, "nopw 0x0(%rax,%rax,1)"},
		{elf.EM_X86_64, le, "66 2e 0f 1f 84 00 00 00 00 00", SiteNop, 10, "cs nopw"},
		{elf.EM_X86_64, le, "66 66 2e 0f 1f 84 00 00 00 00 00", SiteNop, 11, "data16 cs nopw (gas .nops 11)"},
		{elf.EM_X86_64, le, "66 66 66 66 66 66 2e 0f 1f 84 00 00 00 00 00", SiteNop, 15, "15 bytes, the longest"},
		{elf.EM_X86_64, le, "3e 0f 1f 00", SiteNop, 4, "ds prefix"},
		{elf.EM_X86_64, le, "f3 0f 1f 00", SiteNop, 4, "rep prefix"},
		{elf.EM_X86_64, le, "67 0f 1f 00", SiteNop, 4, "addr32 prefix"},
		{elf.EM_X86_64, le, "41 0f 1f 00", SiteNop, 4, "rex.B nopl (%r8)"},
		{elf.EM_X86_64, le, "0f 1f c0", SiteNop, 3, "nop %eax, register operand"},
		{elf.EM_X86_64, le, "86 c0", SiteNop, 2, "xchg %al,%al"},
		{elf.EM_X86_64, le, "66 87 c9", SiteNop, 3, "xchg %cx,%cx"},
		{elf.EM_X86_64, le, "48 87 db", SiteNop, 3, "xchg %rbx,%rbx"},
		{elf.EM_X86_64, le, "90 0f 1f 44 00 00 c3", SiteNopNop5, 6, "libbpf nop,nop5"},
		{elf.EM_X86_64, le, "90 66 2e 0f 1f 84 00 00 00 00 00", SiteNopNop10, 11, "libbpf nop,nop10"},
		{elf.EM_X86_64, le, "90 66 2e 0f 1f 84 00 00 00 00", SiteNop, 1, "nop10 cut short: the nop alone"},
		{elf.EM_X86_64, le, "90 0f 1f 40 00", SiteNop, 1, "nop then a 4-byte nop: no pair"},
		{elf.EM_X86_64, le, "cc", SiteBad, 0, "int3"},
		{elf.EM_X86_64, le, "e8 00 00 00 00", SiteBad, 0, "call"},
		{elf.EM_X86_64, le, "c3", SiteBad, 0, "ret"},
		{elf.EM_X86_64, le, "0f 1f 48 00", SiteBad, 0, "0f 1f /1: reserved hint"},
		{elf.EM_X86_64, le, "0f 1f c8", SiteBad, 0, "0f 1f /1, register form"},
		{elf.EM_X86_64, le, "0f 1f 44 00", SiteBad, 0, "nop5 cut short"},
		{elf.EM_X86_64, le, "0f 1f", SiteBad, 0, "opcode without ModRM"},
		{elf.EM_X86_64, le, "f0 0f 1f 00", SiteBad, 0, "lock: #UD"},
		{elf.EM_X86_64, le, "f3 90", SiteBad, 0, "pause"},
		{elf.EM_X86_64, le, "41 90", SiteBad, 0, "xchg %eax,%r8d"},
		{elf.EM_X86_64, le, "87 c0", SiteBad, 0, "xchg %eax,%eax clears the upper half in 64-bit mode"},
		{elf.EM_X86_64, le, "87 c8", SiteBad, 0, "xchg %ecx,%eax"},
		{elf.EM_X86_64, le, "86 00", SiteBad, 0, "xchg %al,(%rax): memory"},
		{elf.EM_X86_64, le, "89 ff", SiteBad, 0, "mov %edi,%edi"},
		{elf.EM_X86_64, le, "0f 1e fa", SiteBad, 0, "0f 1e"},
		{elf.EM_X86_64, le, "f3 0f 1e fa", SiteBad, 0, "endbr64"},
		{elf.EM_X86_64, le, "0f 0d 00", SiteBad, 0, "prefetch"},
		{elf.EM_X86_64, le, "66 66 66 66 66 66 66 2e 0f 1f 84 00 00 00 00 00", SiteBad, 0, "16 bytes: too long"},
		{elf.EM_X86_64, le, "48 0f 1f 00", SiteBad, 0, "rex.W nopq: x86asm does not decode it"},
		{elf.EM_X86_64, le, "", SiteBad, 0, "nothing"},
		// i386: the same NOPs, no REX; xchg of a 32-bit register is a NOP.
		{elf.EM_386, le, "90", SiteNop, 1, "nop"},
		{elf.EM_386, le, "0f 1f 44 00 00", SiteNop, 5, "nopl 0x0(%eax,%eax,1)"},
		{elf.EM_386, le, "66 2e 0f 1f 84 00 00 00 00 00", SiteNop, 10, "cs nopw"},
		{elf.EM_386, le, "87 c9", SiteNop, 2, "xchg %ecx,%ecx"},
		{elf.EM_386, le, "90 0f 1f 44 00 00", SiteNopNop5, 6, "nop,nop5"},
		{elf.EM_386, le, "48 90", SiteBad, 0, "dec %eax"},
		{elf.EM_386, le, "8d 76 00", SiteBad, 0, "lea 0x0(%esi),%esi"},
		// arm64
		{elf.EM_AARCH64, le, "1f 20 03 d5", SiteNop, 4, "nop, hint #0"},
		{elf.EM_AARCH64, le, "d5 03 20 1f", SiteBad, 0, "nop in the wrong byte order"},
		{elf.EM_AARCH64, le, "3f 20 03 d5", SiteBad, 0, "yield"},
		{elf.EM_AARCH64, le, "df 20 03 d5", SiteBad, 0, "hint #6"},
		{elf.EM_AARCH64, le, "1f 24 03 d5", SiteBad, 0, "bti"},
		{elf.EM_AARCH64, le, "e0 03 00 aa", SiteBad, 0, "mov x0, x0"},
		{elf.EM_AARCH64, le, "c0 03 5f d6", SiteBad, 0, "ret"},
		{elf.EM_AARCH64, le, "1f 20 03", SiteBad, 0, "cut short"},
		// arm
		{elf.EM_ARM, le, "00 f0 20 e3", SiteNop, 4, "A32 nop"},
		{elf.EM_ARM, le, "00 f0 20 03", SiteNop, 4, "A32 nopeq"},
		{elf.EM_ARM, le, "00 00 a0 e1", SiteNop, 4, "A32 mov r0, r0"},
		{elf.EM_ARM, le, "01 10 a0 e1", SiteNop, 4, "A32 mov r1, r1"},
		{elf.EM_ARM, le, "00 bf", SiteNop, 2, "Thumb nop"},
		{elf.EM_ARM, le, "af f3 00 80", SiteNop, 4, "Thumb-2 nop.w"},
		{elf.EM_ARM, le, "c0 46", SiteNop, 2, "Thumb mov r8, r8"},
		{elf.EM_ARM, le, "01 f0 20 e3", SiteBad, 0, "A32 yield"},
		{elf.EM_ARM, le, "00 00 b0 e1", SiteBad, 0, "A32 movs r0, r0 sets flags"},
		{elf.EM_ARM, le, "0f f0 a0 e1", SiteBad, 0, "A32 mov pc, pc branches"},
		{elf.EM_ARM, le, "01 00 a0 e1", SiteBad, 0, "A32 mov r0, r1"},
		{elf.EM_ARM, le, "1e ff 2f e1", SiteBad, 0, "A32 bx lr"},
		{elf.EM_ARM, le, "70 47", SiteBad, 0, "Thumb bx lr"},
		{elf.EM_ARM, le, "00 00", SiteBad, 0, "Thumb movs r0, r0 sets flags"},
		// s390x
		{elf.EM_S390, be, "47 00 00 00", SiteNop, 4, "nop 0 (sys/sdt.h)"},
		{elf.EM_S390, be, "47 01 23 45", SiteNop, 4, "nop 837(%r1,%r2)"},
		{elf.EM_S390, be, "07 00", SiteNop, 2, "nopr"},
		{elf.EM_S390, be, "07 07", SiteNop, 2, "nopr %r7"},
		{elf.EM_S390, be, "a7 04 00 00", SiteNop, 4, "jnop"},
		{elf.EM_S390, be, "c0 04 00 00 00 00", SiteNop, 6, "jgnop"},
		{elf.EM_S390, be, "07 fe", SiteBad, 0, "br %r14"},
		{elf.EM_S390, be, "07 f0", SiteBad, 0, "bcr 15,0: serialisation"},
		{elf.EM_S390, be, "07 e0", SiteBad, 0, "bcr 14,0: fast serialisation"},
		{elf.EM_S390, be, "47 f0 00 00", SiteBad, 0, "b 0"},
		{elf.EM_S390, be, "a7 f4 00 03", SiteBad, 0, "j"},
		{elf.EM_S390, be, "18 11", SiteBad, 0, "lr %r1,%r1"},
		{elf.EM_S390, be, "c0 04 00 00", SiteBad, 0, "jgnop cut short"},
		// riscv64
		{elf.EM_RISCV, le, "13 00 00 00", SiteNop, 4, "nop, addi x0,x0,0"},
		{elf.EM_RISCV, le, "01 00", SiteNop, 2, "c.nop"},
		{elf.EM_RISCV, le, "01 00 13 00", SiteNop, 2, "c.nop before a 4-byte nop"},
		{elf.EM_RISCV, le, "05 00", SiteBad, 0, "c.addi x0, 1: a HINT"},
		{elf.EM_RISCV, le, "13 00 10 00", SiteBad, 0, "addi x0,x0,1: a HINT"},
		{elf.EM_RISCV, le, "93 00 00 00", SiteBad, 0, "addi x1,x0,0"},
		{elf.EM_RISCV, le, "82 80", SiteBad, 0, "c.ret"},
		{elf.EM_RISCV, le, "00 00", SiteBad, 0, "illegal"},
		{elf.EM_RISCV, le, "13 00", SiteBad, 0, "nop cut short"},
		// ppc64 and ppc64le, ppc
		{elf.EM_PPC64, be, "60 00 00 00", SiteNop, 4, "nop"},
		{elf.EM_PPC64, le, "00 00 00 60", SiteNop, 4, "nop, ppc64le"},
		{elf.EM_PPC64, be, "68 00 00 00", SiteNop, 4, "xnop"},
		{elf.EM_PPC64, le, "00 00 00 68", SiteNop, 4, "xnop, ppc64le"},
		{elf.EM_PPC64, be, "07 00 00 00 00 00 00 00", SiteNop, 8, "pnop"},
		{elf.EM_PPC64, le, "00 00 00 07 00 00 00 00", SiteNop, 8, "pnop, ppc64le"},
		{elf.EM_PPC, be, "60 00 00 00", SiteNop, 4, "nop, 32-bit"},
		{elf.EM_PPC64, le, "60 00 00 00", SiteBad, 0, "nop in the wrong byte order"},
		{elf.EM_PPC64, be, "00 00 00 60", SiteBad, 0, "nop in the wrong byte order"},
		{elf.EM_PPC64, be, "60 00 00 01", SiteBad, 0, "ori 0,0,1"},
		{elf.EM_PPC64, be, "68 21 00 00", SiteBad, 0, "xori 1,1,0"},
		{elf.EM_PPC64, be, "7c 21 0b 78", SiteBad, 0, "or 1,1,1: priority hint"},
		{elf.EM_PPC64, be, "4e 80 00 20", SiteBad, 0, "blr"},
		// loongarch64
		{elf.EM_LOONGARCH, le, "00 00 40 03", SiteNop, 4, "nop, andi $zero,$zero,0"},
		{elf.EM_LOONGARCH, le, "00 04 40 03", SiteBad, 0, "andi $zero,$zero,1"},
		{elf.EM_LOONGARCH, le, "00 00 15 00", SiteBad, 0, "move $zero,$zero"},
		{elf.EM_LOONGARCH, le, "20 00 00 4c", SiteBad, 0, "ret"},
	} {
		code := hexBytes(t, c.code)
		got, n, err := classify(c.m, c.data, code)
		if got != c.want || n != c.n || err != nil {
			t.Errorf("%v % x (%s) = %v, %d, %v; want %v, %d", c.m, code, c.what, got, n, err, c.want, c.n)
		}
	}
	if kind, _, err := classify(elf.EM_SPARCV9, elf.ELFDATA2MSB, []byte{1, 0, 0, 0}); kind != SiteUnchecked || err == nil {
		t.Errorf("unknown machine: %v, %v", kind, err)
	}
}

// TestUprobeRefuses: x86 NOPs with a CS, DS, ES or SS prefix are NOPs the
// kernel will not probe; other prefixes, and a pair whose first byte is
// 90, are fine.
func TestUprobeRefuses(t *testing.T) {
	for _, c := range []struct {
		m       elf.Machine
		code    string
		refused bool
	}{
		{elf.EM_X86_64, "66 2e 0f 1f 84 00 00 00 00 00", true},
		{elf.EM_X86_64, "66 66 2e 0f 1f 84 00 00 00 00 00", true},
		{elf.EM_X86_64, "3e 0f 1f 00", true},
		{elf.EM_X86_64, "26 0f 1f 00", true},
		{elf.EM_X86_64, "36 0f 1f 00", true},
		{elf.EM_386, "2e 0f 1f 00", true},
		{elf.EM_X86_64, "64 0f 1f 00", false},
		{elf.EM_X86_64, "65 0f 1f 00", false},
		{elf.EM_X86_64, "66 0f 1f 84 00 00 00 00 00", false},
		{elf.EM_X86_64, "90 66 2e 0f 1f 84 00 00 00 00 00", false},
		{elf.EM_X86_64, "0f 1f 44 00 00", false},
		{elf.EM_AARCH64, "1f 20 03 d5", false},
	} {
		why := uprobeRefuses(c.m, hexBytes(t, c.code))
		if (why != "") != c.refused {
			t.Errorf("%v %s: %q, want refused %v", c.m, c.code, why, c.refused)
		}
	}
}

// FuzzClassify: no input panics, and a NOP's length lies within the
// bytes given. Seeds: the sites of the fixtures of every architecture.
func FuzzClassify(f *testing.F) {
	for _, name := range []string{"usdt_sample", "usdt_nops", "usdt_sample_i386", "usdt_sample_aarch64", "usdt_sample_armhf",
		"usdt_sample_s390x", "usdt_sample_riscv64", "usdt_sample_ppc64", "usdt_sample_ppc64le"} {
		path := testkit.Fixture(name)
		b, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		file, err := Open(path)
		if err != nil {
			f.Fatal(err)
		}
		for _, p := range file.Probes {
			for _, l := range p.Locations {
				f.Add(b[l.FileOffset:min(l.FileOffset+maxSiteBytes, uint64(len(b)))])
			}
		}
	}
	f.Fuzz(func(t *testing.T, code []byte) {
		for m := range nopDecoders {
			for _, d := range []elf.Data{elf.ELFDATA2LSB, elf.ELFDATA2MSB} {
				kind, n, err := classify(m, d, code)
				if err != nil || n > len(code) || (kind == SiteBad) != (n == 0) {
					t.Fatalf("%v % x: %v, %d, %v", m, code, kind, n, err)
				}
			}
		}
	})
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
