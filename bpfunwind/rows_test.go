package bpfunwind_test

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/probekit/probekit/bpfunwind"
	"github.com/probekit/probekit/internal/safeelf"
	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/unwind"
	"github.com/probekit/probekit/usdt/bpf"
)

const libc = "/usr/lib/x86_64-linux-gnu/libc.so.6"

// rowAt is the row in effect at link-time address pc, as the BPF search
// finds it: the last row at or below pc.
func rowAt(rows []bpfunwind.Row, pc uint64) (bpfunwind.Row, bool) {
	i := len(rows) - 1
	for i >= 0 && uint64(rows[i].PC) > pc {
		i--
	}
	if i < 0 {
		return bpfunwind.Row{}, false
	}
	return rows[i], true
}

func symbolAt(t *testing.T, path, name string) uint64 {
	t.Helper()
	f := openELF(t, path)
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	var v uint64
	syms.Lookup(name, func(i int) bool { v = syms.Value(i); return false })
	if v == 0 {
		t.Fatalf("%s: no symbol %s", path, name)
	}
	return v
}

// The rows of the -fomit-frame-pointer fixture and libc: sorted, the
// entry rule at chain_end, the .plt rule, _start outermost, glibc's
// signal trampoline, and past the last FDE frame pointers.
func TestBuild(t *testing.T) {
	fx := testkit.Fixture("stack_chain_nofp")
	tab := loadTable(t, fx)
	rows, err := bpfunwind.Build(tab)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(rows); i++ {
		if rows[i].PC <= rows[i-1].PC {
			t.Fatalf("row %d at %#x after %#x", i, rows[i].PC, rows[i-1].PC)
		}
		if rows[i].Kind == rows[i-1].Kind && rows[i].CFAOff == rows[i-1].CFAOff && rows[i].RBPOff == rows[i-1].RBPOff {
			t.Fatalf("rows %d and %d equal: %+v", i-1, i, rows[i])
		}
	}
	entry := symbolAt(t, fx, "chain_end")
	if r, ok := rowAt(rows, entry); !ok || r != (bpfunwind.Row{PC: uint32(entry), Kind: bpfunwind.KindRSP, CFAOff: 8}) {
		t.Errorf("chain_end's entry: %+v", r)
	}
	if r, _ := rowAt(rows, symbolAt(t, fx, "_start")); r.Kind != bpfunwind.KindOutermost {
		t.Errorf("_start: %+v", r)
	}
	if r := rows[len(rows)-1]; r.Kind != bpfunwind.KindFramePointer {
		t.Errorf("last row %+v", r)
	}

	ltab := loadTable(t, libc)
	lrows, err := bpfunwind.Build(ltab)
	if err != nil {
		t.Fatal(err)
	}
	lf := openELF(t, libc)
	plt := lf.Section(".plt")
	if r, _ := rowAt(lrows, plt.Addr+16); r.Kind != bpfunwind.KindPLT || r.CFAOff != 11 {
		t.Errorf(".plt: %+v", r)
	}
	// __restore_rt, found by its signal frame's "S" augmentation
	// (libc's .symtab is in the debug file).
	var restore uint64
	ltab.Spans(func(s unwind.Span) bool {
		if s.Row != nil && s.Row.Signal {
			restore = s.Start
		}
		return restore == 0
	})
	if r, _ := rowAt(lrows, restore); restore == 0 || r.Kind != bpfunwind.KindSignal {
		t.Errorf("signal frame at %#x: %+v", restore, r)
	}
	// Every row agrees with the CFI row at its address: the CFA rule and
	// where rbp is saved.
	for _, r := range lrows {
		row, err := ltab.Find(uint64(r.PC))
		switch {
		case errors.Is(err, unwind.ErrNoFDE):
			if r.Kind != bpfunwind.KindFramePointer {
				t.Fatalf("row at %#x without FDE: %+v", r.PC, r)
			}
		case err != nil:
			t.Fatal(err)
		case r.Kind == bpfunwind.KindRSP || r.Kind == bpfunwind.KindRBP:
			want := uint16(unwind.RegRSP)
			if r.Kind == bpfunwind.KindRBP {
				want = unwind.RegRBP
			}
			bp := row.Regs[unwind.RegRBP]
			if row.CFA.Reg != want || row.CFA.Off != int64(r.CFAOff) || (bp.Kind == unwind.RuleOffset) != (r.RBPOff != 0) ||
				r.RBPOff != 0 && bp.Off != 8*int64(r.RBPOff) || row.Regs[unwind.RegRA].Off != -8 {
				t.Fatalf("row at %#x: %+v, CFI %+v rbp %+v", r.PC, r, row.CFA, bp)
			}
		}
	}
}

// FuzzBuild builds the rows of mutated .eh_frame sections (seeded from
// the fixtures): no panic, rows sorted.
func FuzzBuild(f *testing.F) {
	paths, _ := filepath.Glob(filepath.Join(testkit.Root(), "testdata", "bin", "*"))
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		ef, err := safeelf.NewFile(bytes.NewReader(raw))
		if err != nil || ef.Machine != elf.EM_X86_64 {
			continue
		}
		if s := ef.Section(".eh_frame"); s != nil && s.Size < 1<<14 {
			if d, err := ef.ReadAt(s.Offset, s.Size, 1<<14); err == nil {
				f.Add(d, s.Addr)
			}
		}
	}
	// Small seeds: two FDEs, one ending at 4 GiB.
	f.Add(ehFrame([2]uint32{0x1000, 0x1100}, [2]uint32{1<<32 - 0x100, 0}), uint64(0x500000))
	f.Add(ehFrame([2]uint32{0x1000, 0x1100}), uint64(0))
	f.Fuzz(func(t *testing.T, data []byte, addr uint64) {
		tab, err := unwind.Parse(data, addr, false, binary.LittleEndian)
		if err != nil {
			return
		}
		rows, err := bpfunwind.Build(tab)
		if err != nil {
			if !errors.Is(err, bpfunwind.ErrAddressRange) {
				t.Fatal(err)
			}
			return
		}
		for i := 1; i < len(rows); i++ {
			if rows[i].PC <= rows[i-1].PC {
				t.Fatalf("row %d at %#x after %#x", i, rows[i].PC, rows[i-1].PC)
			}
		}
	})
}

// The Go constants are unwind.bpf.h's: its #defines, read from the
// header the module embeds.
func TestHeaderConstants(t *testing.T) {
	defs := map[string]int64{}
	for _, line := range strings.Split(string(bpf.UnwindHeader), "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[0] == "#define" {
			if v, err := strconv.ParseInt(f[2], 0, 64); err == nil {
				defs[f[1]] = v
			}
		}
	}
	for name, want := range map[string]int64{
		"PROBEKIT_CFI_MAX_FRAMES":       bpfunwind.MaxFrames,
		"PROBEKIT_CFI_MAX_MAPPINGS":     bpfunwind.MaxMappings,
		"PROBEKIT_CFI_RSP":              int64(bpfunwind.KindRSP),
		"PROBEKIT_CFI_RBP":              int64(bpfunwind.KindRBP),
		"PROBEKIT_CFI_PLT":              int64(bpfunwind.KindPLT),
		"PROBEKIT_CFI_FP":               int64(bpfunwind.KindFramePointer),
		"PROBEKIT_CFI_OUTERMOST":        int64(bpfunwind.KindOutermost),
		"PROBEKIT_CFI_UNSUPPORTED":      int64(bpfunwind.KindUnsupported),
		"PROBEKIT_CFI_SIGNAL":           int64(bpfunwind.KindSignal),
		"PROBEKIT_CFI_STOP_OUTERMOST":   int64(bpfunwind.StopOutermost),
		"PROBEKIT_CFI_STOP_READ":        int64(bpfunwind.StopRead),
		"PROBEKIT_CFI_STOP_UNSUPPORTED": int64(bpfunwind.StopUnsupported),
		"PROBEKIT_CFI_STOP_NO_PROGRESS": int64(bpfunwind.StopNoProgress),
		"PROBEKIT_CFI_STOP_DEPTH":       int64(bpfunwind.StopDepth),
	} {
		if got, ok := defs[name]; !ok || got != want {
			t.Errorf("%s: header %d (%v), Go %d", name, got, ok, want)
		}
	}
}

// ehFrame is an .eh_frame of one "zR" CIE (udata4 absolute addresses,
// CFA = rsp+8 and the return address at CFA-8 at entry) and one FDE per
// [start, end) given, each with CFA = rsp+16 from its fifth byte.
func ehFrame(fdes ...[2]uint32) []byte {
	le := binary.LittleEndian
	cie := []byte{0, 0, 0, 0, 1, 'z', 'R', 0, 1, 0x78, 16, 1, 0x03, 0x0c, 7, 8, 0x90, 1, 0, 0}
	b := le.AppendUint32(nil, uint32(len(cie)))
	b = append(b, cie...)
	for _, f := range fdes {
		at := len(b)
		body := le.AppendUint32(nil, uint32(at+4)) // back to the CIE at 0
		body = le.AppendUint32(body, f[0])
		body = le.AppendUint32(body, f[1]-f[0])
		body = append(body, 0, 0x44, 0x0e, 16, 0, 0, 0) // no augmentation data; advance 4, CFA offset 16
		b = le.AppendUint32(b, uint32(len(body)))
		b = append(b, body...)
	}
	return le.AppendUint32(b, 0)
}

// An FDE that ends at 4 GiB: its last row reaches 4 GiB (no row at 4
// GiB, which 32 bits would write as 0, ahead of every other row, so
// that the walk's search went wrong for every address); one that
// crosses 4 GiB is refused (ErrAddressRange), and Tables walks its
// object by frame pointers.
func TestBuildAt4GiB(t *testing.T) {
	const top = 1 << 32
	data := ehFrame([2]uint32{0x1000, 0x1100}, [2]uint32{top - 0x100, 0}) // 0: 4 GiB, wrapped by uint32
	// The FDE's range is 0x100: its end is 1<<32 exactly.
	tab, err := unwind.Parse(data, 0x500000, false, binary.LittleEndian)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := bpfunwind.Build(tab)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(rows); i++ {
		if rows[i].PC <= rows[i-1].PC {
			t.Fatalf("rows %+v: row %d at %#x after %#x", rows, i, rows[i].PC, rows[i-1].PC)
		}
	}
	for _, c := range []struct {
		pc   uint64
		want bpfunwind.Row
	}{
		{0x1000, bpfunwind.Row{PC: 0x1000, Kind: bpfunwind.KindRSP, CFAOff: 8}},
		{0x1050, bpfunwind.Row{PC: 0x1004, Kind: bpfunwind.KindRSP, CFAOff: 16}},
		{0x2000, bpfunwind.Row{PC: 0x1100, Kind: bpfunwind.KindFramePointer}},
		{top - 0x100, bpfunwind.Row{PC: top - 0x100, Kind: bpfunwind.KindRSP, CFAOff: 8}},
		{top - 1, bpfunwind.Row{PC: top - 0xfc, Kind: bpfunwind.KindRSP, CFAOff: 16}},
	} {
		if r, ok := rowAt(rows, c.pc); !ok || r != c.want {
			t.Errorf("at %#x: %+v (%v), want %+v", c.pc, r, ok, c.want)
		}
	}
	if _, ok := rowAt(rows, 0xfff); ok {
		t.Errorf("a row below the first FDE: %+v", rows)
	}

	// Past 4 GiB: refused, with the FDE named.
	b := ehFrame([2]uint32{0x1000, 0x1100})
	// A range of 0x200 from 4 GiB - 0x100: patch the one FDE's fields.
	binary.LittleEndian.PutUint32(b[24+8:], top-0x100)
	binary.LittleEndian.PutUint32(b[24+12:], 0x200)
	tab, err = unwind.Parse(b, 0x500000, false, binary.LittleEndian)
	if err != nil {
		t.Fatal(err)
	}
	if rows, err := bpfunwind.Build(tab); !errors.Is(err, bpfunwind.ErrAddressRange) || !strings.Contains(err.Error(), "0x100000100") {
		t.Errorf("an FDE across 4 GiB: rows %+v, error %v", rows, err)
	}
}
