package python_test

import (
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/probekit/probekit/debuginfo"
	"github.com/probekit/probekit/interp/python"
	"github.com/probekit/probekit/procmaps"
)

// started runs py with args until the test ends and opens its process
// once it has mapped libpython (it prints a line then).
func started(t *testing.T, env []string, py string, args ...string) *procmaps.Process {
	t.Helper()
	cmd := exec.Command(py, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	line := make(chan error, 1)
	go func() {
		b := make([]byte, 1)
		_, err := out.Read(b)
		line <- err
	}()
	select {
	case err := <-line:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no line from the interpreter within 20s")
	}
	p, err := procmaps.Open(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

const waitScript = "import sys; print('up', flush=True); sys.stdin.read()"

// TestFindDebugFile strips pyenv's libpython3.11 of its DWARF, runs
// Python with the stripped copy, and finds the offsets in the debug file
// by build ID in a debug directory; without that directory they come
// from the table.
func TestFindDebugFile(t *testing.T) {
	const lib = "/root/.pyenv/versions/3.11.7/lib/libpython3.11.so.1.0"
	const py = "/root/.pyenv/versions/3.11.7/bin/python3.11"
	if _, err := os.Stat(lib); err != nil {
		t.Skipf("no %s", lib)
	}
	dir := t.TempDir()
	libDir, dbgDir := filepath.Join(dir, "lib"), filepath.Join(dir, "debug")
	os.MkdirAll(libDir, 0o755)
	stripped := filepath.Join(libDir, filepath.Base(lib))
	if out, err := exec.Command("objcopy", "--strip-debug", lib, stripped).CombinedOutput(); err != nil {
		t.Skipf("objcopy: %v: %s", err, out)
	}
	f, err := os.Open(lib)
	if err != nil {
		t.Fatal(err)
	}
	id, err := debuginfo.BuildID(f)
	f.Close()
	if err != nil || len(id) < 2 {
		t.Fatalf("build ID %x: %v", id, err)
	}
	h := hex.EncodeToString(id)
	debugFile := filepath.Join(dbgDir, ".build-id", h[:2], h[2:]+".debug")
	os.MkdirAll(filepath.Dir(debugFile), 0o755)
	if out, err := exec.Command("objcopy", "--only-keep-debug", lib, debugFile).CombinedOutput(); err != nil {
		t.Fatalf("objcopy: %v: %s", err, out)
	}
	p := started(t, []string{"LD_LIBRARY_PATH=" + libDir}, py, "-c", waitScript)

	in, err := python.FindWith(p, &python.FindOptions{Debug: &debuginfo.Options{DebugDirs: []string{dbgDir}, Offline: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if in.Path != stripped || in.Source != python.SourceDWARF {
		t.Errorf("%s, offsets from %v; want %s from DWARF", in.Path, in.Source, stripped)
	}
	in2, err := python.FindWith(p, &python.FindOptions{Debug: &debuginfo.Options{DebugDirs: []string{filepath.Join(dir, "none")}, Offline: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer in2.Close()
	if in2.Source != python.SourceTable || in2.Offsets != in.Offsets {
		t.Errorf("without the debug file: offsets from %v, equal %v; want the table's, equal to DWARF's", in2.Source, in2.Offsets == in.Offsets)
	}
}

// TestFindNotPython: a process without CPython is ErrNotPython.
func TestFindNotPython(t *testing.T) {
	p, err := procmaps.Open(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := python.Find(p); !errors.Is(err, python.ErrNotPython) {
		t.Errorf("Find in the test binary: %v, want ErrNotPython", err)
	}
}
