package debuginfo

import (
	"bytes"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/probekit/probekit/internal/safeelf"
	"github.com/probekit/probekit/internal/test/testkit"
)

// fixture is a debuginfo fixture (testdata/debuginfo/bin, make testdata).
func fixture(name string) string {
	return filepath.Join(testkit.Root(), "testdata", "debuginfo", "bin", name)
}

func open(t testing.TB, path string) *os.File {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// copyTo copies src to dir/name, creating dir.
func copyTo(t *testing.T, src, dir, name string) string {
	t.Helper()
	dst := filepath.Join(dir, name)
	testkit.CopyFile(t, src, dst)
	if err := os.Chmod(dst, 0o644); err != nil {
		t.Fatal(err)
	}
	return dst
}

// find runs Find on path with opts, collecting warnings.
func find(t *testing.T, path string, opts *Options) (*File, []error, error) {
	t.Helper()
	var warns []error
	if opts == nil {
		opts = &Options{}
	}
	opts.Warn = func(err error) { warns = append(warns, err) }
	d, err := Find(open(t, path), path, opts)
	if d != nil {
		t.Cleanup(func() { d.Close() })
	}
	return d, warns, err
}

// funcsOf reads the function table of obj joined with its debug file.
func funcsOf(t *testing.T, path string, opts *Options) *safeelf.Funcs {
	t.Helper()
	f := open(t, path)
	ef, err := safeelf.NewFile(f)
	if err != nil {
		t.Fatal(err)
	}
	funcs, err := Functions(ef, f, path, opts)
	if err != nil {
		t.Fatal(err)
	}
	return funcs
}

// ownFuncs reads the object's own function table, without a debug file.
func ownFuncs(t *testing.T, path string) *safeelf.Funcs {
	t.Helper()
	ef, err := safeelf.NewFile(open(t, path))
	if err != nil {
		t.Fatal(err)
	}
	funcs, err := ef.Functions()
	if err != nil {
		t.Fatal(err)
	}
	return funcs
}

func lookup(funcs *safeelf.Funcs, name string) (addr uint64, ok bool) {
	funcs.Lookup(name, func(i int) bool { addr, ok = funcs.Address(i), true; return false })
	return addr, ok
}

// TestDebugLink: a stripped -g -O2 program, DWARF 4 and 5, linked to its
// debug file by .gnu_debuglink, finds it beside itself, in .debug/ and
// under a debug directory; its static function joins the table at the
// address the debug file's .symtab gives.
func TestDebugLink(t *testing.T) {
	for _, name := range []string{"dbg_v5", "dbg_v4"} {
		for _, where := range []string{"beside", ".debug", "debugdir"} {
			t.Run(name+"/"+where, func(t *testing.T) {
				dir, debugDir := t.TempDir(), t.TempDir()
				obj := copyTo(t, fixture(name), dir, name)
				var want string
				switch where {
				case "beside":
					want = copyTo(t, fixture(name+".debug"), dir, name+".debug")
				case ".debug":
					want = copyTo(t, fixture(name+".debug"), filepath.Join(dir, ".debug"), name+".debug")
				case "debugdir":
					want = copyTo(t, fixture(name+".debug"), filepath.Join(debugDir, dir), name+".debug")
				}
				opts := &Options{DebugDirs: []string{debugDir}, Offline: true}
				d, warns, err := find(t, obj, opts)
				if err != nil {
					t.Fatal(err)
				}
				if d.Source != SourceDebugLink || d.Path != want || len(warns) != 0 {
					t.Fatalf("found %s at %s (warnings %v), want debuglink at %s", d.Source, d.Path, warns, want)
				}
				if _, ok := lookup(ownFuncs(t, obj), "scale_static"); ok {
					t.Fatal("scale_static found without the debug file: the fixture is not stripped")
				}
				addr, ok := lookup(funcsOf(t, obj, opts), "scale_static")
				if wantAddr := testkit.FunctionValue(t, fixture(name+".debug"), "scale_static"); !ok || addr != wantAddr {
					t.Fatalf("scale_static at %#x (%v), debug file says %#x", addr, ok, wantAddr)
				}
			})
		}
	}
}

// TestDebugLinkCRC: a debug file whose CRC differs from the link's is
// skipped with a warning, never used; the search goes on to the next
// place.
func TestDebugLinkCRC(t *testing.T) {
	dir := t.TempDir()
	obj := copyTo(t, fixture("dbg_v5"), dir, "dbg_v5")
	bad := copyTo(t, fixture("dbg_v5.debug"), dir, "dbg_v5.debug")
	b, err := os.ReadFile(bad)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-1] ^= 0xff // the last section header's last byte: still an ELF file
	if err := os.WriteFile(bad, b, 0o644); err != nil {
		t.Fatal(err)
	}
	opts := &Options{DebugDirs: []string{t.TempDir()}, Offline: true}
	d, warns, err := find(t, obj, opts)
	if !errors.Is(err, ErrNotFound) || d != nil {
		t.Fatalf("corrupt debug file used: %v %v", d, err)
	}
	if len(warns) != 1 || !errors.Is(warns[0], ErrMismatch) || !strings.Contains(warns[0].Error(), "CRC") {
		t.Fatalf("warnings %v, want one CRC mismatch", warns)
	}
	if !errors.Is(err, ErrMismatch) {
		t.Errorf("the error does not carry the warning: %v", err)
	}
	// The good copy in .debug/ is found after the bad one is refused.
	good := copyTo(t, fixture("dbg_v5.debug"), filepath.Join(dir, ".debug"), "dbg_v5.debug")
	d, warns, err = find(t, obj, opts)
	if err != nil || d.Path != good || len(warns) != 1 || len(d.Warnings) != 1 {
		t.Fatalf("found %v (%v), warnings %v", d, err, warns)
	}
}

// TestDebugLinkNotBaseName: a debuglink naming a path is refused before
// any file is opened.
func TestDebugLinkNotBaseName(t *testing.T) {
	for _, evil := range []string{"../v5.debug1", "/etc/passwd1"} {
		dir := t.TempDir()
		b, err := os.ReadFile(fixture("dbg_v5"))
		if err != nil {
			t.Fatal(err)
		}
		i := bytes.Index(b, []byte("dbg_v5.debug\x00"))
		if i < 0 || len(evil) != len("dbg_v5.debug") {
			t.Fatal("debuglink name not found in the fixture")
		}
		copy(b[i:], evil)
		obj := filepath.Join(dir, "dbg_v5")
		if err := os.WriteFile(obj, b, 0o644); err != nil {
			t.Fatal(err)
		}
		// Where the name would lead, a valid debug file waits.
		copyTo(t, fixture("dbg_v5.debug"), filepath.Dir(dir), "v5.debug1")
		t.Cleanup(func() { os.Remove(filepath.Join(filepath.Dir(dir), "v5.debug1")) })
		d, warns, err := find(t, obj, &Options{DebugDirs: []string{t.TempDir()}, Offline: true})
		if !errors.Is(err, ErrNotFound) || d != nil {
			t.Fatalf("%q: %v %v", evil, d, err)
		}
		if len(warns) != 1 || !errors.Is(warns[0], ErrBadLink) {
			t.Fatalf("%q: warnings %v, want ErrBadLink", evil, warns)
		}
	}
}

// buildIDDir makes a debug directory holding src as the debug file of
// the build ID of obj: DIR/.build-id/NN/REST.debug.
func buildIDDir(t *testing.T, obj, src string) (dir, path string) {
	t.Helper()
	id := testkit.BuildID(t, obj)
	dir = t.TempDir()
	return dir, copyTo(t, src, filepath.Join(dir, ".build-id", id[:2]), id[2:]+".debug")
}

// TestBuildID: a stripped program without a debuglink finds its debug
// file by build ID; a file of another build at that path is refused.
func TestBuildID(t *testing.T) {
	obj := fixture("dbg_id")
	dir, want := buildIDDir(t, obj, fixture("dbg_id.debug"))
	d, warns, err := find(t, obj, &Options{DebugDirs: []string{dir}, Offline: true})
	if err != nil {
		t.Fatal(err)
	}
	if d.Source != SourceBuildID || d.Path != want || len(warns) != 0 || hex.EncodeToString(d.BuildID) != testkit.BuildID(t, obj) {
		t.Fatalf("found %s at %s, build ID %x, warnings %v", d.Source, d.Path, d.BuildID, warns)
	}
	addr, ok := lookup(funcsOf(t, obj, &Options{DebugDirs: []string{dir}, Offline: true}), "scale_static")
	if want := testkit.FunctionValue(t, fixture("dbg_id.debug"), "scale_static"); !ok || addr != want {
		t.Fatalf("scale_static at %#x (%v), want %#x", addr, ok, want)
	}

	// Another build's debug file under this build ID.
	dir, _ = buildIDDir(t, obj, fixture("dbg_v4.debug"))
	d, warns, err = find(t, obj, &Options{DebugDirs: []string{dir}, Offline: true})
	if !errors.Is(err, ErrNotFound) || d != nil {
		t.Fatalf("foreign debug file used: %v %v", d, err)
	}
	if len(warns) != 1 || !errors.Is(warns[0], ErrMismatch) || !strings.Contains(warns[0].Error(), "build ID") {
		t.Fatalf("warnings %v, want a build ID mismatch", warns)
	}
	// Functions goes on without it: the object's own table.
	if got, own := funcsOf(t, obj, &Options{DebugDirs: []string{dir}, Offline: true}), ownFuncs(t, obj); got.Len() != own.Len() || got.SymtabFromDebug {
		t.Fatalf("%d functions, the object's own table has %d", got.Len(), own.Len())
	}
}

// TestSelf: a file with DWARF is its own debug file; one with a .symtab
// but no DWARF is when nothing else is found; a stripped one without any
// debug file is ErrNotFound.
func TestSelf(t *testing.T) {
	empty := &Options{DebugDirs: []string{t.TempDir()}, Offline: true}
	d, _, err := find(t, fixture("dbg_v5.debug"), empty)
	if err != nil || d.Source != SourceSelf {
		t.Fatalf("debug file: %v %v", d, err)
	}
	d, _, err = find(t, testkit.Fixture("usdt_sample"), empty)
	if err != nil || d.Source != SourceSelf {
		t.Fatalf("unstripped -g0 program: %v %v", d, err)
	}
	if _, _, err := find(t, fixture("dbg_id"), empty); !errors.Is(err, ErrNotFound) {
		t.Fatalf("stripped program without a debug file: %v", err)
	}
}

// TestLibc: Debian's libc6-dbg gives the stripped libc its static
// functions: _int_malloc joins the table at the address of the debug
// file's symbol.
func TestLibc(t *testing.T) {
	const libc = testkit.Libc
	want := testkit.LibcDebugFile(t)
	d, warns, err := find(t, libc, &Options{Offline: true})
	if err != nil || d.Source != SourceBuildID || d.Path != want || len(warns) != 0 {
		t.Fatalf("libc: %v %v %v", d, err, warns)
	}
	own := ownFuncs(t, libc)
	if _, ok := lookup(own, "_int_malloc"); ok {
		t.Fatal("_int_malloc in the stripped libc's own tables")
	}
	funcs := funcsOf(t, libc, &Options{Offline: true})
	addr, ok := lookup(funcs, "_int_malloc")
	if wantAddr := testkit.FunctionValue(t, want, "_int_malloc"); !ok || addr != wantAddr {
		t.Fatalf("_int_malloc at %#x (%v), debug file says %#x", addr, ok, wantAddr)
	}
	if !funcs.SymtabFromDebug || funcs.Len() <= own.Len() {
		t.Fatalf("%d functions with the debug file, %d without", funcs.Len(), own.Len())
	}
	// malloc, from both tables, is listed once.
	n := 0
	funcs.Lookup("malloc", func(int) bool { n++; return true })
	if n != 1 {
		t.Fatalf("malloc listed %d times", n)
	}
	t.Logf("libc: %d functions, %d with its debug file", own.Len(), funcs.Len())
}

// TestCompressedDebugFile: a debug file with zlib, zstd or .zdebug
// sections is found by build ID and its DWARF reads decompressed, the
// same bytes as the uncompressed file's.
func TestCompressedDebugFile(t *testing.T) {
	obj := fixture("dbg_v5")
	plain, _, err := find(t, fixture("dbg_v5.debug"), nil)
	if err != nil {
		t.Fatal(err)
	}
	want, err := plain.ReadSection(".debug_info", 1<<20)
	if err != nil || len(want) == 0 {
		t.Fatalf("plain .debug_info: %d bytes, %v", len(want), err)
	}
	for _, variant := range []string{"zlib", "zstd", "gnu"} {
		dir, path := buildIDDir(t, obj, fixture("dbg_v5."+variant+".debug"))
		d, warns, err := find(t, obj, &Options{DebugDirs: []string{dir}, Offline: true})
		if err != nil || d.Path != path || len(warns) != 0 {
			t.Fatalf("%s: %v %v %v", variant, d, err, warns)
		}
		got, err := d.ReadSection(".debug_info", 1<<20)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s: .debug_info %d bytes (%v), want %d", variant, len(got), err, len(want))
		}
		if _, err := d.ReadSection(".debug_info", uint64(len(want)-1)); err == nil {
			t.Fatalf("%s: the size ceiling was not enforced", variant)
		}
	}
}
