package symbolize

import (
	"strings"
	"testing"

	"github.com/probekit/probekit/interp"
)

// A C function called from Python called from C: the inlined frames of
// an address stay with it, Python's frames stand before the eval loop.
func TestMergeInterp(t *testing.T) {
	addrs := []uint64{0x1000, 0x5010, 0x7000}
	named := []Frame{
		{Address: 0x1000, Function: "fixture_leaf", Object: "lib.so"},
		{Address: 0x5010, Function: "call_helper", Inlined: true, Object: "python3.11"},
		{Address: 0x5010, Function: "_PyEval_EvalFrameDefault", Offset: 0x10, Object: "python3.11"},
		{Address: 0x7000, Function: "main", Object: "python3.11"},
	}
	raws := []interp.Raw{{Code: 1}, {Code: 2, Flags: interp.FlagRunEnd}}
	py := []interp.Frame{{Func: "inner", File: "app.py", Line: 3, Runtime: "python"}, {Func: "outer", File: "app.py", Line: 9, Runtime: "python"}}
	parts, _ := interp.Merge(nil, addrs, raws, [][2]uint64{{0x5000, 0x6000}}, true)
	got := MergeInterp(nil, named, parts, py)
	var lines []string
	for _, f := range got {
		lines = append(lines, f.String())
	}
	want := []string{
		"0x1000 fixture_leaf+0x0 (lib.so)",
		"inner app.py:3 [python]",
		"outer app.py:9 [python]",
		"<python: more frames than the walk keeps> [python]",
		"0x5010 call_helper (inlined) (python3.11)",
		"0x5010 _PyEval_EvalFrameDefault+0x10 (python3.11)",
		"0x7000 main+0x0 (python3.11)",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	// Parts out of range are skipped, not a panic.
	bad := []interp.Part{{Kind: interp.PartNative, Index: 9}, {Kind: interp.PartInterp, Index: -1}, {Kind: interp.PartNative, Index: 0}}
	if got := MergeInterp(nil, named, bad, py); len(got) != 1 || got[0].Function != "fixture_leaf" {
		t.Errorf("out-of-range parts: %v", got)
	}
}
