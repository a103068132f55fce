package debuginfo

import (
	"bytes"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"github.com/probekit/probekit/internal/safeelf"
	"github.com/probekit/probekit/internal/test/elfseed"
)

// maxFuzzSeed keeps the seeds small enough to mutate usefully.
const maxFuzzSeed = 96 << 10

// addSeeds adds elfseed's small files, one of them linking to
// dbg_v5.debug, and (when not fuzzing, as regression inputs) the
// fixtures whole.
func addSeeds(f *testing.F) {
	elfseed.Each(func(_ string, b []byte) { f.Add(b) })
	if dbg, err := os.ReadFile(fixture("dbg_v5.debug")); err == nil {
		f.Add(elfseed.DebugLink("dbg_v5.debug", dbg))
	}
	if elfseed.Fuzzing() {
		return
	}
	files, _ := filepath.Glob(fixture("*"))
	for _, path := range files {
		if b, err := os.ReadFile(path); err == nil && len(b) <= maxFuzzSeed {
			f.Add(b)
		}
	}
}

// FuzzFindObject: a hostile object (its notes, its .gnu_debuglink) next
// to a real debug file. Find and Functions never panic; a debug file they
// use carries the object's build ID.
func FuzzFindObject(f *testing.F) {
	addSeeds(f)
	// One directory for the executions of a worker process, which run
	// one after another: a directory and a copy per execution made
	// file system work most of the time.
	dir := f.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "dbg_v5.debug"), mustRead(f, fixture("dbg_v5.debug")), 0o644); err != nil {
		f.Fatal(err)
	}
	obj := filepath.Join(dir, "dbg_v5")
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(obj, data, 0o644); err != nil {
			t.Fatal(err)
		}
		opts := &Options{DebugDirs: []string{dir}, Offline: true}
		of := open(t, obj)
		if d, err := Find(of, obj, opts); err == nil {
			checkFound(t, d)
			d.Close()
		}
		if ef, err := safeelf.NewFile(of); err == nil {
			Functions(ef, of, obj, opts)
		}
	})
}

// FuzzFindDebugFile: a hostile debug file under the build ID of a real
// stripped program. Find never panics and never uses a file of another
// build ID; the joined function table stays consistent (each function is
// found by its name and by its address).
func FuzzFindDebugFile(f *testing.F) {
	addSeeds(f)
	obj := fixture("dbg_id")
	ef0, err := safeelf.NewFile(bytes.NewReader(mustRead(f, obj)))
	if err != nil {
		f.Fatal(err)
	}
	id, err := ef0.BuildID()
	if err != nil || len(id) < 2 {
		f.Fatalf("dbg_id build ID %x: %v", id, err)
	}
	dir := f.TempDir() // as in FuzzFindObject
	h := hex.EncodeToString(id)
	p := filepath.Join(dir, ".build-id", h[:2], h[2:]+".debug")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		opts := &Options{DebugDirs: []string{dir}, Offline: true}
		of := open(t, obj)
		if d, err := Find(of, obj, opts); err == nil {
			checkFound(t, d)
			if !bytes.Equal(d.BuildID, id) {
				t.Fatalf("build ID %x, the object's %x", d.BuildID, id)
			}
			d.Close()
		}
		ef, err := safeelf.NewFile(of)
		if err != nil {
			t.Fatal(err)
		}
		funcs, err := Functions(ef, of, obj, opts)
		if err != nil {
			t.Fatal(err)
		}
		for i := range funcs.Len() {
			found := false
			funcs.Lookup(funcs.Name(i), func(j int) bool { found = j == i; return !found })
			if _, ok := funcs.At(funcs.Address(i)); !found || !ok {
				t.Fatalf("function %d (%s at %#x) not found by name or address", i, funcs.Name(i), funcs.Address(i))
			}
		}
	})
}

// checkFound: a debug file Find returns carries its own build ID equal
// to the object's, when both have one.
func checkFound(t *testing.T, d *File) {
	t.Helper()
	ef, err := safeelf.NewFile(d)
	if err != nil {
		t.Fatalf("returned an unreadable file: %v", err)
	}
	if d.Source == SourceSelf {
		return
	}
	if id, _ := ef.BuildID(); id != nil && d.BuildID != nil && !bytes.Equal(id, d.BuildID) {
		t.Fatalf("used %s with build ID %x, the object's is %x", d.Path, id, d.BuildID)
	}
}

func mustRead(tb testing.TB, path string) []byte {
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}
