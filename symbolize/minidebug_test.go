package symbolize

import (
	"path/filepath"
	"testing"

	"github.com/probekit/probekit/internal/test/testkit"
)

// TestMiniDebugInfo: a stripped object without a debug file names its
// static function from .gnu_debugdata; with debug information turned
// off it does not.
func TestMiniDebugInfo(t *testing.T) {
	obj := filepath.Join(testkit.Root(), "testdata", "debuginfo", "bin", "mini")
	addr := testkit.FunctionValue(t, obj+".debug", "mini_static")
	f, err := New(nil).File(obj)
	if err != nil {
		t.Fatal(err)
	}
	if fr := f.Frame(addr + 4); fr.Function != "mini_static" || fr.Offset != 4 {
		t.Fatalf("%#x: %+v, want mini_static+4", addr+4, fr)
	}
	g, err := New(&Options{NoDebugInfo: true}).File(obj)
	if err != nil {
		t.Fatal(err)
	}
	if fr := g.Frame(addr + 4); fr.Function == "mini_static" {
		t.Fatalf("NoDebugInfo: %+v, still named", fr)
	}
}
