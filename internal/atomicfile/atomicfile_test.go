package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// entries are the names in dir.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A reader during the write sees the old file whole; after it, the new
// one, with the old file's mode, and no temporary is left.
func TestWriteReplaces(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.pprof")
	if err := os.WriteFile(path, []byte("old profile"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := Write(path, func(w io.Writer) error {
		io.WriteString(w, "new ")
		if got := read(t, path); got != "old profile" {
			t.Errorf("during the write the path holds %q", got)
		}
		_, err := io.WriteString(w, "profile")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := read(t, path); got != "new profile" {
		t.Errorf("after the write: %q", got)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v (%v), want the old file's 0600", st.Mode(), err)
	}
	if e := entries(t, dir); len(e) != 1 {
		t.Errorf("directory holds %q", e)
	}
	// A new file gets DefaultPerm.
	fresh := filepath.Join(dir, "fresh")
	if err := Write(fresh, func(w io.Writer) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(fresh); err != nil || st.Mode().Perm() != DefaultPerm {
		t.Errorf("new file's mode %v (%v)", st.Mode(), err)
	}
}

// A write that fails halfway leaves the old content and no temporary.
// In place (os.Create), the old profile was truncated and half a new
// one left.
func TestWriteFails(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.pprof")
	if err := os.WriteFile(path, []byte("old profile"), 0o644); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("disk full")
	err := Write(path, func(w io.Writer) error {
		io.WriteString(w, strings.Repeat("half", 1000))
		return boom
	})
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), path) {
		t.Fatalf("error %v, want %v naming the path", err, boom)
	}
	if got := read(t, path); got != "old profile" {
		t.Errorf("after a failed write the path holds %q", got[:min(len(got), 40)])
	}
	if e := entries(t, dir); len(e) != 1 || e[0] != "out.pprof" {
		t.Errorf("directory holds %q: a temporary was left", e)
	}
	// A panic in write also removes the temporary.
	func() {
		defer func() { recover() }()
		Write(path, func(w io.Writer) error { panic("write panicked") })
	}()
	if e := entries(t, dir); len(e) != 1 {
		t.Errorf("after a panic the directory holds %q", e)
	}
}

// A symbolic link at the path (planted by another user in a shared
// directory) is replaced by the file; the file it points to is left
// alone. os.Create followed it and truncated the target.
func TestWriteSymlink(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "out.pprof")
	if err := os.Symlink(victim, path); err != nil {
		t.Fatal(err)
	}
	if err := Write(path, func(w io.Writer) error { _, err := io.WriteString(w, "profile"); return err }); err != nil {
		t.Fatal(err)
	}
	if got := read(t, victim); got != "precious" {
		t.Errorf("the link's target now holds %q", got)
	}
	st, err := os.Lstat(path)
	if err != nil || !st.Mode().IsRegular() {
		t.Fatalf("path is %v (%v), want a regular file", st.Mode(), err)
	}
	if got := read(t, path); got != "profile" {
		t.Errorf("path holds %q", got)
	}
	// A dangling link too.
	dangling := filepath.Join(dir, "dangling")
	if err := os.Symlink(filepath.Join(dir, "nowhere"), dangling); err != nil {
		t.Fatal(err)
	}
	if err := Write(dangling, func(w io.Writer) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "nowhere")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the dangling link's target was created (%v)", err)
	}
}

// A directory or a FIFO at the path is refused, untouched.
func TestWriteNotRegular(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	called := false
	err := Write(sub, func(w io.Writer) error { called = true; return nil })
	if !errors.Is(err, ErrNotRegular) || called {
		t.Errorf("a directory: %v (write called %v)", err, called)
	}
	if st, err := os.Lstat(sub); err != nil || !st.IsDir() {
		t.Errorf("the directory is now %v (%v)", st.Mode(), err)
	}
	if e := entries(t, dir); len(e) != 1 {
		t.Errorf("directory holds %q", e)
	}
}
