package unwind

import (
	"encoding/binary"
	"slices"
	"testing"

	"github.com/probekit/probekit/internal/test/elftest"
	"github.com/probekit/probekit/internal/test/testkit"
)

// objects maps [start, end) to a table with bias, for tests.
type objects []struct {
	start, end, bias uint64
	t                *Table
}

func (o objects) Lookup(pc uint64) (*Table, uint64, bool) {
	for _, m := range o {
		if pc >= m.start && pc < m.end {
			return m.t, m.bias, true
		}
	}
	return nil, 0, false
}

// stack builds a StackCopy at addr from 8-byte words.
func stack(addr uint64, words ...uint64) StackCopy {
	b := make([]byte, 0, 8*len(words))
	for _, w := range words {
		b = binary.LittleEndian.AppendUint64(b, w)
	}
	return StackCopy{Addr: addr, Data: b}
}

// A synthetic stack through the -fomit-frame-pointer fixture's CFI:
// at chain_end's entry the return address is at rsp (CFA = rsp+8); the
// chain functions move rsp no further, so each next return address is
// the next word. The last return address lies in code without CFI and
// is walked by the frame pointer, whose record's return address is 0.
func TestUnwindSynthetic(t *testing.T) {
	f := elftest.Open(t, testkit.Fixture("stack_chain_nofp"))
	tab, err := Load(f)
	if err != nil {
		t.Fatal(err)
	}
	const bias = 0x5500_0000_0000
	at := func(fn string, off uint64) uint64 { return symbol(t, f, fn) + off + bias }
	objs := objects{{bias, bias + 0x10000, bias, tab}, {0x1000, 0x2000, 0, nil}}
	// rsp = 0x7000: chain_c's return site, chain_b's, chain_a's, then
	// an address in the table-less object.
	mem := stack(0x7000, at("chain_c", 6), at("chain_b", 5), at("chain_a", 5), 0x1010,
		0 /* rbp's frame record at 0x7020: saved rbp */, 0 /* return address */)
	var regs Regs
	regs.Set(RegRA, at("chain_end", 0))
	regs.Set(RegRSP, 0x7000)
	regs.Set(RegRBP, 0x7020)
	res := Unwind(regs, mem, objs)
	want := []uint64{at("chain_end", 0), at("chain_c", 6), at("chain_b", 5), at("chain_a", 5), 0x1010}
	if !slices.Equal(res.Frames, want) || res.Stop != StopOutermost || res.ByFramePointer != 1 {
		t.Errorf("frames %#x, stop %v, %d by frame pointer; want %#x, outermost, 1", res.Frames, res.Stop, res.ByFramePointer, want)
	}

	// The copy ends before chain_a's return address: a clean stop.
	res = Unwind(regs, StackCopy{Addr: mem.Addr, Data: mem.Data[:16]}, objs)
	if len(res.Frames) != 3 || res.Stop != StopOutsideStack {
		t.Errorf("short copy: frames %#x, stop %v", res.Frames, res.Stop)
	}
	// A return address in no mapping.
	mem2 := stack(0x7000, 0xdead0000)
	res = Unwind(regs, mem2, objs)
	if len(res.Frames) != 2 || res.Stop != StopUnmapped {
		t.Errorf("unmapped: frames %#x, stop %v", res.Frames, res.Stop)
	}
}

// At a function's entry in code without CFI (Go), AtEntry takes the
// return address at rsp and keeps rbp, the caller's frame record; a
// plain frame-pointer step from there skips the caller.
func TestUnwindAtEntryWithoutCFI(t *testing.T) {
	objs := objects{{0x1000, 0x2000, 0, nil}}
	// rsp = 0x7000: the caller's return site 0x1100; rbp = 0x7010, the
	// caller's frame record: saved rbp 0x7020, its return site 0x1200;
	// then the outermost record (0, 0).
	mem := stack(0x7000, 0x1100, 0, 0x7020, 0x1200, 0, 0)
	s := Sample{IP: 0x1010, SP: 0x7000, BP: 0x7010, Stack: mem}
	res := s.Unwind(objs)
	if want := []uint64{0x1010, 0x1200}; !slices.Equal(res.Frames, want) {
		t.Errorf("by frame pointers: %#x, want %#x", res.Frames, want)
	}
	s.AtEntry = true
	res = s.Unwind(objs)
	if want := []uint64{0x1010, 0x1100, 0x1200}; !slices.Equal(res.Frames, want) || res.Stop != StopOutermost {
		t.Errorf("at entry: %#x (%v), want %#x, outermost", res.Frames, res.Stop, want)
	}
}
