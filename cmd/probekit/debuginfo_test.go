package main

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/probekit/probekit/internal/test/testkit"
)

// TestListFunctionsDebugFile: a stripped program lists, through the debug
// file its .gnu_debuglink names, every function nm shows in that debug
// file, static ones included; the stripped libc lists _int_malloc
// through libc6-dbg at the address nm gives it there.
func TestListFunctionsDebugFile(t *testing.T) {
	path := filepath.Join(testkit.Root(), "testdata", "debuginfo", "bin", "dbg_v5")
	code, out, stderr := runCmd("list", "--functions", path)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	got := listed(t, out)
	want := nmText(t, path+".debug", "Tt")
	if len(want) == 0 || !want[findKey(want, "scale_static")] {
		t.Fatalf("nm finds no scale_static in the debug file: %v", want)
	}
	for k := range want {
		if !got[k] {
			t.Errorf("nm lists %s in the debug file, probekit does not list it for the stripped program", k)
		}
	}

	dbg := testkit.LibcDebugFile(t)
	code, out, stderr = runCmd("list", "--functions", "libc.so.6", "_int_malloc")
	if code != 0 {
		t.Fatalf("libc: exit %d: %s", code, stderr)
	}
	key := findKey(nmText(t, dbg, "t"), "_int_malloc")
	if got := listed(t, out); len(got) != 1 || !got[key] {
		t.Fatalf("libc _int_malloc listed as %v, nm in the debug file says %q", got, key)
	}
}

// findKey returns the "address name" key of name in set, "" for none.
func findKey(set map[string]bool, name string) string {
	for k := range set {
		if strings.HasSuffix(k, " "+name) {
			return k
		}
	}
	return ""
}

// TestTraceStaticLibcFunction: probekit trace attaches libc's static
// _int_malloc by name (known only from libc6-dbg's debug file) and sees
// the sizes the fixture mallocs, in order, as its second argument.
func TestTraceStaticLibcFunction(t *testing.T) {
	testkit.RequireKernel(t)
	requireAMD64(t)
	testkit.LibcDebugFile(t)
	fx := testkit.Fixture("func_args")
	hits, _ := traceFuncJSON(t, append(launchedLibrary(t), "uprobe:libc.so.6:_int_malloc", "--", fx, "3")...)
	var sizes []string
	for _, h := range hits {
		if h.Function != "_int_malloc" || h.Kind != "uprobe" || len(h.Args) < 2 {
			t.Fatalf("hit %+v", h)
		}
		// Sizes above the tcache's reach _int_malloc as they are.
		if size := string(h.Args[1]); len(size) == 4 && size >= "4242" && size <= "4244" {
			sizes = append(sizes, size)
		}
	}
	if !slices.Equal(sizes, []string{"4242", "4243", "4244"}) {
		t.Fatalf("_int_malloc sizes %v, want 4242, 4243, 4244 in order (%d hits)", sizes, len(hits))
	}
}
