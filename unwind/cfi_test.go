package unwind

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/probekit/probekit/internal/safeelf"
	"github.com/probekit/probekit/internal/test/elfseed"
	"github.com/probekit/probekit/internal/test/elftest"
	"github.com/probekit/probekit/internal/test/testkit"
)

func TestMain(m *testing.M) { os.Exit(testkit.RunWithLeakCheck(m)) }

func symbol(t testing.TB, f *safeelf.File, name string) uint64 {
	t.Helper()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	var v uint64
	syms.Lookup(name, func(i int) bool { v = syms.Value(i); return false })
	if v == 0 {
		t.Fatalf("no symbol %s", name)
	}
	return v
}

// hdrCount reads .eh_frame_hdr's fde_count (LSB: version, three
// encodings, eh_frame_ptr, fde_count; udata4 / sdata4 as every binary
// here has them).
func hdrCount(t *testing.T, f *safeelf.File) int {
	t.Helper()
	s := f.Section(".eh_frame_hdr")
	b, err := f.ReadAt(s.Offset, 12, 12)
	if err != nil {
		t.Fatal(err)
	}
	if b[1] != 0x1b || b[2] != 0x03 {
		t.Fatalf("hdr encodings %#x %#x", b[1], b[2])
	}
	return int(binary.LittleEndian.Uint32(b[8:]))
}

// The -fomit-frame-pointer fixture: every chain function has an FDE;
// at the first instruction the CIE's rule holds (CFA = rsp+8, return
// address at CFA-8), and the FDE count equals .eh_frame_hdr's.
func TestFixtureTable(t *testing.T) {
	f := elftest.Open(t, testkit.Fixture("stack_chain_nofp"))
	tab, err := Load(f)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tab.Len(), hdrCount(t, f); got != want {
		t.Errorf("%d FDEs, .eh_frame_hdr counts %d", got, want)
	}
	for _, fn := range []string{"chain_end", "chain_c", "chain_b", "chain_a", "fire", "main", "_start"} {
		row, err := tab.Find(symbol(t, f, fn))
		if err != nil {
			t.Errorf("%s: %v", fn, err)
			continue
		}
		ra := row.Regs[RegRA]
		if row.CFA.Reg != RegRSP || row.CFA.Off != 8 || ra.Kind != RuleOffset || ra.Off != -8 {
			if fn == "_start" && ra.Kind == RuleUndefined {
				continue // glibc's start.S: cfi_undefined (rip)
			}
			t.Errorf("%s: CFA r%d%+d, RA %+v", fn, row.CFA.Reg, row.CFA.Off, ra)
		}
	}
	// _start's return address is undefined after its first instruction.
	row, err := tab.Find(symbol(t, f, "_start") + 4)
	if err != nil || row.Regs[RegRA].Kind != RuleUndefined {
		t.Errorf("_start+4: %+v, %v; want the return address undefined", row.Regs[RegRA], err)
	}
	if _, err := tab.Find(1); !errors.Is(err, ErrNoFDE) {
		t.Errorf("address 1: %v, want ErrNoFDE", err)
	}
}

// Without section headers the table is found through PT_GNU_EH_FRAME
// and is the same.
func TestNoSectionHeaders(t *testing.T) {
	a, err := Load(elftest.Open(t, testkit.Fixture("usdt_sample")))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Load(elftest.Open(t, testkit.Fixture("usdt_sample_noshdr")))
	if err != nil {
		t.Fatal(err)
	}
	if a.Len() == 0 || a.Len() != b.Len() {
		t.Fatalf("%d FDEs by section, %d by PT_GNU_EH_FRAME", a.Len(), b.Len())
	}
	for i := range a.fdes {
		if a.fdes[i].start != b.fdes[i].start || a.fdes[i].end != b.fdes[i].end {
			t.Errorf("FDE %d: [%#x,%#x) vs [%#x,%#x)", i, a.fdes[i].start, a.fdes[i].end, b.fdes[i].start, b.fdes[i].end)
		}
	}
}

const libc = "/usr/lib/x86_64-linux-gnu/libc.so.6"

// Debian's libc: every FDE of .eh_frame_hdr is parsed and every row of
// every FDE computes (the zPLR and zRS CIEs included); the signal
// trampoline __restore_rt is marked and its CFA is an expression.
func TestLibc(t *testing.T) {
	f := elftest.Open(t, libc)
	tab, err := Load(f)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tab.Len(), hdrCount(t, f); got != want {
		t.Errorf("%d FDEs, .eh_frame_hdr counts %d", got, want)
	}
	for _, e := range tab.fdes {
		for pc := e.start; pc < e.end; pc += max((e.end-e.start)/8, 1) {
			if _, err := tab.Find(pc); err != nil {
				t.Fatalf("%#x: %v", pc, err)
			}
		}
	}
	var restore uint64
	for _, e := range tab.fdes {
		if e.cie.signal {
			restore = e.start + 1
		}
	}
	row, err := tab.Find(restore)
	if restore == 0 || err != nil || !row.Signal || !row.CFA.Expr.Set() || row.Regs[RegRA].Kind != RuleExpression {
		t.Errorf("signal frame at %#x: %+v, %v", restore, row, err)
	}
}

// FuzzParse feeds mutated .eh_frame sections (seeded from the fixtures
// and libc) to Parse, every Find and Spans: no panic, corruption is a
// located *FormatError or ErrUnsupported.
func FuzzParse(f *testing.F) {
	paths, _ := filepath.Glob(filepath.Join(testkit.Root(), "testdata", "bin", "*"))
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		ef, err := safeelf.NewFile(bytes.NewReader(b))
		if err != nil {
			continue
		}
		if s := ef.Section(".eh_frame"); s != nil && s.Size < 1<<14 {
			if d, err := ef.ReadAt(s.Offset, s.Size, 1<<14); err == nil {
				f.Add(d, s.Addr, false)
			}
		}
	}
	f.Add(elfseed.EHFrame(0x1000), uint64(0x1000), false)
	f.Fuzz(func(t *testing.T, data []byte, addr uint64, debug bool) {
		tab, err := Parse(data, addr, debug, binary.LittleEndian)
		var fe *FormatError
		if err != nil {
			if !errors.As(err, &fe) && !errors.Is(err, ErrUnsupported) {
				t.Fatalf("neither a *FormatError nor ErrUnsupported: %v", err)
			}
			return
		}
		if tab.Len() > len(data)/8 {
			t.Fatalf("%d FDEs from %d bytes", tab.Len(), len(data))
		}
		for _, e := range tab.fdes {
			for _, pc := range []uint64{e.start, e.start + (e.end-e.start)/2, e.end - 1} {
				if _, err := tab.Find(pc); err != nil && !errors.As(err, &fe) && !errors.Is(err, ErrUnsupported) && !errors.Is(err, ErrNoFDE) { // overlapping FDEs hide each other
					t.Fatalf("Find(%#x): %v", pc, err)
				}
			}
		}
		// Spans: each from at least one instruction byte (an advance)
		// or an FDE; errors located or unsupported.
		n := 0
		tab.Spans(func(s Span) bool {
			n++
			if s.Start >= s.End || n > tab.Len()+len(data) {
				t.Fatalf("span %d [%#x, %#x) of %d FDEs", n, s.Start, s.End, tab.Len())
			}
			if s.Err != nil && !errors.As(s.Err, &fe) && !errors.Is(s.Err, ErrUnsupported) {
				t.Fatalf("span at %#x: %v", s.Start, s.Err)
			}
			return true
		})
	})
}

// FuzzLoad: whole ELF files through Load, the entry point of
// Cache (the section found by header or through .eh_frame_hdr), then
// Spans: no panic, errors located or unsupported. Seeded with
// elfseed's small files (the one with .eh_frame among them).
func FuzzLoad(f *testing.F) {
	elfseed.Each(func(_ string, b []byte) { f.Add(b) })
	f.Fuzz(func(t *testing.T, data []byte) {
		ef, err := safeelf.NewFile(bytes.NewReader(data))
		if err != nil {
			return
		}
		tab, err := Load(ef)
		var fe *FormatError
		var sfe *safeelf.FormatError
		if err != nil {
			if !errors.As(err, &fe) && !errors.As(err, &sfe) && !errors.Is(err, ErrUnsupported) && !errors.Is(err, ErrNoCFI) {
				t.Fatalf("Load: %v", err)
			}
			return
		}
		n := 0
		tab.Spans(func(s Span) bool {
			if n++; n > 1<<16 {
				return false
			}
			if s.Start >= s.End {
				t.Fatalf("span [%#x, %#x)", s.Start, s.End)
			}
			return true
		})
	})
}

// The .plt FDE's CFA expression (rsp+8, 8 more once rip&15 >= 11, past
// the push of the lazy-binding stub) evaluates as its formula says.
func TestPLTExpression(t *testing.T) {
	f := elftest.Open(t, libc)
	tab, err := Load(f)
	if err != nil {
		t.Fatal(err)
	}
	plt := f.Section(".plt")
	row, err := tab.Find(plt.Addr + 16) // past PLT0, the first entry
	if err != nil || !row.CFA.Expr.Set() {
		t.Fatalf(".plt at %#x: %+v, %v", plt.Addr, row.CFA, err)
	}
	for _, c := range []struct{ rip, want uint64 }{{0x1000, 0x7008}, {0x100a, 0x7008}, {0x100b, 0x7010}, {0x101f, 0x7010}} {
		var regs Regs
		regs.Set(RegRSP, 0x7000)
		regs.Set(RegRA, c.rip)
		got, err := eval(tab.ExprBytes(row.CFA.Expr), &regs, StackCopy{}, nil)
		if err != nil || got != c.want {
			t.Errorf("rip %#x: CFA %#x, %v; want %#x", c.rip, got, err, c.want)
		}
	}
}
