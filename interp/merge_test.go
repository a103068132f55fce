package interp

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
)

// show writes a merged stack as names: native frames by their address
// ("n1000"), interpreted ones by their code ("p1"), the cut marker "cut".
func show(parts []Part, native []uint64, raws []Raw) string {
	var out []string
	for _, p := range parts {
		switch p.Kind {
		case PartNative:
			out = append(out, fmt.Sprintf("n%x", native[p.Index]))
		case PartInterp:
			out = append(out, fmt.Sprintf("p%d", raws[p.Index].Code))
		case PartInterpCut:
			out = append(out, "cut")
		}
	}
	return strings.Join(out, " ")
}

func TestMerge(t *testing.T) {
	// The eval loop is at [0x5000, 0x6000): a return address 0x5000 is
	// a call just before it, 0x6000 a call at its last byte.
	eval := [][2]uint64{{0x5000, 0x6000}, {0x9000, 0x9100}}
	end := FlagRunEnd
	for _, tc := range []struct {
		name     string
		native   []uint64
		raws     []Raw
		cut      bool
		want     string
		leftover int
	}{
		{"no python", []uint64{0x1000, 0x5010, 0x7000}, nil, false, "n1000 n5010 n7000", 0},
		{"one run (3.11: a run per eval frame)", []uint64{0x1000, 0x5010, 0x7000},
			[]Raw{{Code: 1}, {Code: 2}, {Code: 3, Flags: end}}, false,
			"n1000 p1 p2 p3 n5010 n7000", 0},
		{"C, Python, C, Python, C", []uint64{0x1000, 0x5010, 0x2000, 0x5020, 0x7000},
			[]Raw{{Code: 1, Flags: end}, {Code: 2}, {Code: 3, Flags: end}}, false,
			"n1000 p1 n5010 n2000 p2 p3 n5020 n7000", 0},
		{"the probe in the eval loop itself", []uint64{0x5000, 0x7000},
			[]Raw{{Code: 1, Flags: end}}, false, "p1 n5000 n7000", 0},
		{"return addresses are looked up at the call", []uint64{0x1000, 0x5000, 0x6000},
			[]Raw{{Code: 1, Flags: end}}, false, "n1000 n5000 p1 n6000", 0},
		{"a second eval function", []uint64{0x1000, 0x9050},
			[]Raw{{Code: 1, Flags: end}}, false, "n1000 p1 n9050", 0},
		{"more eval frames than runs", []uint64{0x1000, 0x5010, 0x5020},
			[]Raw{{Code: 1, Flags: end}}, false, "n1000 p1 n5010 n5020", 0},
		{"native walk ended early", []uint64{0x1000, 0x5010},
			[]Raw{{Code: 1, Flags: end}, {Code: 2, Flags: end}, {Code: 3, Flags: end}}, false,
			"n1000 p1 n5010 p2 p3", 2},
		{"no eval frame found", []uint64{0x1000, 0x2000},
			[]Raw{{Code: 1}, {Code: 2, Flags: end}}, false, "n1000 n2000 p1 p2", 2},
		{"a bad frame ends the part, never the native frames", []uint64{0x1000, 0x5010, 0x2000, 0x5020, 0x7000},
			[]Raw{{Code: 1}, {Code: 2, Flags: FlagBad | end}, {Code: 3, Flags: end}}, false,
			"n1000 p1 p2 n5010 n2000 n5020 n7000", 0},
		{"a bad frame without run end", []uint64{0x5010, 0x5020},
			[]Raw{{Code: 1, Flags: FlagBad}, {Code: 2, Flags: end}}, true,
			"p1 n5010 n5020", 0},
		{"cut by depth in a run", []uint64{0x1000, 0x5010, 0x5020},
			[]Raw{{Code: 1}, {Code: 2}}, true, "n1000 p1 p2 cut n5010 n5020", 0},
		{"cut by depth after a run end", []uint64{0x1000, 0x5010, 0x5020},
			[]Raw{{Code: 1, Flags: end}}, true, "n1000 p1 cut n5010 n5020", 0},
		{"cut, in the leftovers", []uint64{0x1000},
			[]Raw{{Code: 1}}, true, "n1000 p1 cut", 1},
		{"cut without frames", []uint64{0x1000, 0x5010}, nil, true, "n1000 n5010", 0},
		{"no native frames", nil, []Raw{{Code: 1, Flags: end}}, false, "p1", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parts, left := Merge(nil, tc.native, tc.raws, eval, tc.cut)
			if got := show(parts, tc.native, tc.raws); got != tc.want || left != tc.leftover {
				t.Errorf("got %q (%d left over), want %q (%d)", got, left, tc.want, tc.leftover)
			}
			checkMerge(t, parts, tc.native, tc.raws)
		})
	}
}

func TestMergeReusesDst(t *testing.T) {
	buf := make([]Part, 0, 16)
	parts, _ := Merge(buf, []uint64{0x5010}, []Raw{{Code: 1, Flags: FlagRunEnd}}, [][2]uint64{{0x5000, 0x6000}}, false)
	if &parts[0] != &buf[:1][0] {
		t.Error("Merge allocated with room in dst")
	}
	if n := testing.AllocsPerRun(100, func() {
		Merge(buf[:0], []uint64{0x5010, 0x1000}, []Raw{{Code: 1, Flags: FlagRunEnd}}, [][2]uint64{{0x5000, 0x6000}}, false)
	}); n != 0 {
		t.Errorf("%v allocations per merge", n)
	}
}

// checkMerge checks what holds of every merge: every native frame once,
// in order; interpreted frames in order, each at most once, all of
// them up to the first bad one and none after it; at most one marker,
// after the last interpreted frame.
func checkMerge(t *testing.T, parts []Part, native []uint64, raws []Raw) {
	t.Helper()
	end := len(raws)
	for i, r := range raws {
		if r.Flags&FlagBad != 0 {
			end = i + 1
			break
		}
	}
	nextN, nextI, cuts := 0, 0, 0
	for k, p := range parts {
		switch p.Kind {
		case PartNative:
			if p.Index != nextN {
				t.Fatalf("part %d: native %d, want %d", k, p.Index, nextN)
			}
			nextN++
		case PartInterp:
			if p.Index != nextI || p.Index >= end {
				t.Fatalf("part %d: interpreted %d, want %d (of %d placed)", k, p.Index, nextI, end)
			}
			nextI++
		case PartInterpCut:
			if nextI != end || cuts > 0 {
				t.Fatalf("part %d: a marker after %d of %d interpreted frames (%d markers before)", k, nextI, end, cuts)
			}
			cuts++
		default:
			t.Fatalf("part %d: kind %d", k, p.Kind)
		}
	}
	if nextN != len(native) || nextI != end {
		t.Fatalf("placed %d of %d native frames, %d of %d interpreted", nextN, len(native), nextI, end)
	}
}

func FuzzMerge(f *testing.F) {
	f.Add([]byte{0x10, 0x50, 0x20, 0x50, 0x70}, []byte{1, 0, 1}, false)
	f.Add([]byte{0x50}, []byte{0, 2, 1}, true)
	f.Add([]byte{}, []byte{1}, true)
	f.Fuzz(func(t *testing.T, nat, flags []byte, cut bool) {
		if len(nat) > 300 || len(flags) > 64 {
			return
		}
		native := make([]uint64, len(nat))
		for i, b := range nat {
			// 0x50xx is the eval loop; b's low bits vary the offset.
			native[i] = uint64(b>>4)<<12 | uint64(b&15)
		}
		raws := make([]Raw, len(flags))
		for i, b := range flags {
			raws[i] = Raw{Code: uint64(i + 1), Instr: binary.LittleEndian.Uint32([]byte{b, 0, 0, 0}), Flags: uint32(b & 3)}
		}
		parts, left := Merge(nil, native, raws, [][2]uint64{{0x5000, 0x6000}}, cut)
		checkMerge(t, parts, native, raws)
		trailing := 0
		for k := len(parts) - 1; k >= 0 && parts[k].Kind != PartNative; k-- {
			if parts[k].Kind == PartInterp {
				trailing++
			}
		}
		if len(native) > 0 && trailing != left {
			t.Fatalf("%d interpreted frames after the last native one, %d left over", trailing, left)
		}
	})
}
