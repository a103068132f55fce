package python

import (
	"os"
	"testing"

	"github.com/probekit/probekit/internal/safeelf"
)

// TestDebugOffsetsMatchDWARF reads 3.13's _Py_DebugOffsets from the
// file and compares every offset it gives with the DWARF's.
func TestDebugOffsetsMatchDWARF(t *testing.T) {
	path := dwarfPythons[13]
	f, err := os.Open(path)
	if err != nil {
		t.Skipf("no %s", path)
	}
	defer f.Close()
	ef, err := safeelf.NewFile(f)
	if err != nil {
		t.Fatal(err)
	}
	syms, err := ef.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	rt, ok := defined(syms, "_PyRuntime")
	if !ok {
		t.Fatal("no _PyRuntime")
	}
	v := Version{3, 13, 0}
	got, err := offsetsFromDebugOffsets(ef, rt.Value, v)
	if err != nil {
		t.Fatal(err)
	}
	if err := got.check(v); err != nil {
		t.Fatal(err)
	}
	want, err := dwarfOffsets(ef)
	if err != nil {
		t.Fatal(err)
	}
	wf := want.fields()
	for i, g := range got.fields() {
		if *g.p >= 0 && *g.p != *wf[i].p {
			t.Errorf("%s: _Py_DebugOffsets %d, DWARF %d", g.name, *g.p, *wf[i].p)
		}
	}
	if _, err := offsetsFromDebugOffsets(ef, rt.Value, Version{3, 12, 0}); err == nil {
		t.Error("3.13's _Py_DebugOffsets taken for 3.12")
	}
}
