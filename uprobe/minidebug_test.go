package uprobe

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/probekit/probekit/internal/test/testkit"
)

// TestStaticFunctionMiniDebugInfo: a stripped program without a debug
// file offers the static function its .gnu_debugdata names, at the
// address the full .symtab gives, and a uprobe on it by that name sees
// each call's argument.
func TestStaticFunctionMiniDebugInfo(t *testing.T) {
	obj := filepath.Join(testkit.Root(), "testdata", "debuginfo", "bin", "mini")
	b := mustOpen(t, obj)
	fn, err := b.Function("mini_static")
	if want := testkit.FunctionValue(t, obj+".debug", "mini_static"); err != nil || fn.Address != want || fn.Global {
		t.Fatalf("mini_static = %+v, %v; the full .symtab says %#x (local)", fn, err, want)
	}
	if path, warns := b.DebugFile(); !strings.HasSuffix(path, "[.gnu_debugdata]") || len(warns) != 0 {
		t.Fatalf("DebugFile = %q, %v", path, warns)
	}

	testkit.RequireKernel(t)
	for _, mode := range modes(t) {
		t.Run(string(mode), func(t *testing.T) {
			useMode(t, mode)
			fx := startFixture(t, obj)
			prog, m := recorder(t, regRDI, regRDI)
			l, err := b.Entry("mini_static", prog, &Options{PID: fx.PID(), Cookie: 7})
			mustAttach(t, l, err)
			fx.Do("loop mini 4")
			got := hits(t, m, 7)
			for r := uint64(0); r < 4; r++ {
				if got[[2]uint64{r, r}] != 1 {
					t.Fatalf("mini_static(%d) seen %d times; all hits %v", r, got[[2]uint64{r, r}], got)
				}
			}
			if n := total(got); n != 4 {
				t.Fatalf("%d hits, want 4: %v", n, got)
			}
		})
	}
}
