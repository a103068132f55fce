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
