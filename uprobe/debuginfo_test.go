package uprobe

import (
	"debug/elf"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/probekit/probekit/debuginfo"
	"github.com/probekit/probekit/internal/test/testkit"
)

const regRSI = 104 // struct pt_regs, x86-64

// TestStaticFunctionOfStrippedLibc: the stripped libc names _int_malloc
// (a static function, in no table of the file itself) through its
// libc6-dbg debug file, at the debug file's address, and an entry probe
// attached by that name sees exactly the mallocs of the fixture's
// process, with the size the fixture asked for.
func TestStaticFunctionOfStrippedLibc(t *testing.T) {
	dbg := testkit.LibcDebugFile(t)
	b, err := Open(testkit.Libc)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	fn, err := b.Function("_int_malloc")
	if err != nil {
		t.Fatal(err)
	}
	if want := testkit.FunctionValue(t, dbg, "_int_malloc"); fn.Address != want || fn.Source != SymbolTable || fn.Global {
		t.Fatalf("_int_malloc = %+v, the debug file says %#x (local)", fn, want)
	}
	if off := testkit.FileOffset(t, mustELF(t, testkit.Libc), fn.Address); fn.Offset != off {
		t.Fatalf("_int_malloc offset %#x, the segments give %#x", fn.Offset, off)
	}

	testkit.RequireKernel(t)
	for _, mode := range modes(t) {
		t.Run(string(mode), func(t *testing.T) {
			useMode(t, mode)
			fx := startFixture(t, mallocUser)
			other := startFixture(t, mallocUser) // same sizes, must not be seen
			prog, m := recorder(t, regRSI, regRSI)
			l, err := b.Entry("_int_malloc", prog, &Options{PID: fx.PID(), Cookie: 9})
			mustAttach(t, l, err)
			const size, n = 12345, 5 // above the tcache's sizes: each malloc reaches _int_malloc
			other.Do("malloc 12345 5")
			fx.Do("malloc 12345 5")
			got := hits(t, m, 9)
			if c := got[[2]uint64{size, size}]; c != n {
				t.Fatalf("_int_malloc(av, %d) seen %d times, want %d; all hits %v", size, c, n, got)
			}
		})
	}
}

func mustELF(t *testing.T, path string) *elf.File {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// TestStaticFunctionOfStrippedFixture: a stripped fixture offers its
// static function through the debug file its debuglink names, at that
// file's address; without the debug file, the error says what is
// missing.
func TestStaticFunctionOfStrippedFixture(t *testing.T) {
	obj := filepath.Join(testkit.Root(), "testdata", "debuginfo", "bin", "dbg_v5")
	b, err := Open(obj)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	fn, err := b.Function("scale_static")
	if want := testkit.FunctionValue(t, obj+".debug", "scale_static"); err != nil || fn.Address != want {
		t.Fatalf("scale_static = %+v, %v; the debug file says %#x", fn, err, want)
	}

	if path, warns := b.DebugFile(); path != obj+".debug" || len(warns) != 0 {
		t.Fatalf("DebugFile = %q, %v", path, warns)
	}

	// Another build's debug file under the linked name: refused (its
	// build ID differs),
	// said in the warnings, and the static function stays unknown.
	dir := t.TempDir()
	alone := filepath.Join(dir, "dbg_v5")
	testkit.CopyFile(t, obj, alone)
	testkit.CopyFile(t, obj[:len(obj)-1]+"4.debug", filepath.Join(dir, "dbg_v5.debug"))
	c, err := Open(alone)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Function("scale_static"); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "no debug file") {
		t.Fatalf("without the debug file: %v", err)
	}
	if path, warns := c.DebugFile(); path != "" || len(warns) != 1 || !errors.Is(warns[0], debuginfo.ErrMismatch) {
		t.Fatalf("DebugFile = %q, %v; want none and a mismatch", path, warns)
	}
}
