package unwind

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/procmaps"
)

// copyFixture copies the fixture name to dir/as.
func copyFixture(t *testing.T, name, dir, as string) string {
	t.Helper()
	b, err := os.ReadFile(testkit.Fixture(name))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, as)
	if err := os.WriteFile(p, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func openT(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// TestCacheStaleIdentity: a file that reuses a cached file's device and
// inode (here: another file given under the same FileID, and the same
// file rewritten in place) is read again, not served the old table. The
// old cache kept the first table for the FileID whatever file came.
func TestCacheStaleIdentity(t *testing.T) {
	dir := t.TempDir()
	a := copyFixture(t, "recurse", dir, "a")
	b := copyFixture(t, "stack_chain", dir, "b")
	id := procmaps.FileID{Dev: 1, Inode: 42}
	c := NewCache()
	ea := c.loadFile(id, "a", openT(t, a))
	eb := c.loadFile(id, "b", openT(t, b))
	if ea.t == nil || eb.t == nil || ea.err != nil || eb.err != nil {
		t.Fatalf("tables %v %v, errors %v %v", ea.t != nil, eb.t != nil, ea.err, eb.err)
	}
	if ea.t == eb.t {
		t.Fatal("another file with the same device and inode got the cached table")
	}
	if again := c.loadFile(id, "b", openT(t, b)); again.t != eb.t {
		t.Error("the same file unchanged was read again")
	}
	if c.Len() != 1 || c.Size() != eb.t.Size {
		t.Errorf("cache holds %d entries, %d bytes; want 1, %d", c.Len(), c.Size(), eb.t.Size)
	}
	// Rewritten in place: same inode, other contents and times.
	time.Sleep(10 * time.Millisecond)
	data, err := os.ReadFile(a)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if e := c.loadFile(id, "b", openT(t, b)); e.t == eb.t || e.t == nil || e.t.Size != ea.t.Size {
		t.Error("a file rewritten in place got its old table")
	}
}

// TestCacheTransientError: an object that fails to open (the process
// gone, the file unreadable for now) is not remembered: the next load
// reads it. The old cache kept the error for good.
func TestCacheTransientError(t *testing.T) {
	proc, err := procmaps.Open(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	objs, err := proc.Objects()
	if err != nil || len(objs) == 0 {
		t.Fatalf("objects of this process: %d, %v", len(objs), err)
	}
	ob := &objs[0]
	fail := true
	saved := openObject
	openObject = func(p *procmaps.Process, ob *procmaps.Object) (*os.File, error) {
		if fail {
			return nil, os.ErrPermission
		}
		return saved(p, ob)
	}
	defer func() { openObject = saved }()
	c := NewCache()
	if e := c.load(proc, ob); !errors.Is(e.err, os.ErrPermission) {
		t.Fatalf("failing open: %v", e.err)
	}
	fail = false
	// The object is read now (the test binary: a Go program has no
	// .eh_frame, a deterministic error about its contents).
	if e := c.load(proc, ob); errors.Is(e.err, os.ErrPermission) {
		t.Fatalf("after the failure: %v: the failure was kept", e.err)
	}
	if c.Len() != 1 {
		t.Errorf("%d entries after reading one file", c.Len())
	}
}

// TestCacheEviction: with MaxBytes below the tables of three files, the
// least recently used are dropped and the size stays under the limit
// (the last one read is kept even alone above it). The old cache grew
// with every file.
func TestCacheEviction(t *testing.T) {
	dir := t.TempDir()
	var paths []string
	for i, n := range []string{"recurse", "stack_chain", "func_args", "latency"} {
		paths = append(paths, copyFixture(t, n, dir, string(rune('a'+i))))
	}
	probe := NewCache()
	var sizes []int
	for i, p := range paths {
		e := probe.loadFile(procmaps.FileID{Inode: uint64(i + 1)}, p, openT(t, p))
		if e.t == nil {
			t.Fatalf("%s: %v", p, e.err)
		}
		sizes = append(sizes, e.t.Size)
	}
	if probe.Size() != sizes[0]+sizes[1]+sizes[2]+sizes[3] {
		t.Fatalf("size %d, tables %v", probe.Size(), sizes)
	}
	c := &Cache{MaxBytes: sizes[2] + sizes[3]}
	for i, p := range paths {
		c.loadFile(procmaps.FileID{Inode: uint64(i + 1)}, p, openT(t, p))
		if i == 1 {
			// The first is used again: the second is the least recent.
			c.loadFile(procmaps.FileID{Inode: 1}, paths[0], openT(t, paths[0]))
		}
	}
	if c.Size() > c.MaxBytes {
		t.Fatalf("size %d above MaxBytes %d", c.Size(), c.MaxBytes)
	}
	c.mu.Lock()
	_, second := c.tables[procmaps.FileID{Inode: 2}]
	_, last := c.tables[procmaps.FileID{Inode: 4}]
	c.mu.Unlock()
	if second || !last {
		t.Errorf("second (least recent) kept %v, last kept %v", second, last)
	}
	t.Logf("tables %v, limit %d: %d entries, %d bytes", sizes, c.MaxBytes, c.Len(), c.Size())
}

// failingReader fails every read that reaches past off with EIO, as a
// disk or network file system does for a while.
type failingReader struct {
	f   *os.File
	off int64
}

func (r failingReader) ReadAt(b []byte, off int64) (int, error) {
	if off+int64(len(b)) > r.off {
		return 0, &os.PathError{Op: "read", Path: r.f.Name(), Err: syscall.EIO}
	}
	return r.f.ReadAt(b, off)
}

func (r failingReader) Size() int64 {
	st, err := r.f.Stat()
	if err != nil {
		return -1
	}
	return st.Size()
}

// TestCacheReadError: a read that fails with an errno (EIO) is not
// kept: the next load of the same file, unchanged, reads it. The old
// cache kept the error until the file changed.
func TestCacheReadError(t *testing.T) {
	dir := t.TempDir()
	p := copyFixture(t, "stack_chain", dir, "a")
	id := procmaps.FileID{Dev: 1, Inode: 7}
	saved := readerOf
	defer func() { readerOf = saved }()
	readerOf = func(f *os.File) io.ReaderAt { return failingReader{f, 4096} } // the headers read, not the sections
	c := NewCache()
	if e := c.loadFile(id, p, openT(t, p)); !errors.Is(e.err, syscall.EIO) {
		t.Fatalf("failing reads: table %v, error %v", e.t != nil, e.err)
	}
	if c.Len() != 0 {
		t.Errorf("the read error was kept: %d entries", c.Len())
	}
	readerOf = saved
	if e := c.loadFile(id, p, openT(t, p)); e.t == nil || e.err != nil {
		t.Fatalf("after the failure: table %v, error %v", e.t != nil, e.err)
	}
	// An error of the contents (not ELF) is kept while the file is the
	// same.
	txt := filepath.Join(dir, "text")
	if err := os.WriteFile(txt, []byte("not an ELF file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if e := c.loadFile(procmaps.FileID{Dev: 1, Inode: 8}, txt, openT(t, txt)); e.err == nil || transient(e.err) {
		t.Fatalf("a text file: %v", e.err)
	}
	if c.Len() != 2 {
		t.Errorf("%d entries, want the table and the text file's error", c.Len())
	}
}

// TestCacheEntries: files without a table (errors, no memory) are
// bounded by MaxEntries, the least recently used dropped. The old cache
// evicted by bytes alone and kept every error.
func TestCacheEntries(t *testing.T) {
	dir := t.TempDir()
	c := &Cache{MaxEntries: 2}
	for i := range 5 {
		p := filepath.Join(dir, strconv.Itoa(i))
		if err := os.WriteFile(p, []byte("not ELF "+strconv.Itoa(i)), 0o644); err != nil {
			t.Fatal(err)
		}
		if e := c.loadFile(procmaps.FileID{Inode: uint64(i + 1)}, p, openT(t, p)); e.err == nil {
			t.Fatalf("%s: no error", p)
		}
		if c.Len() > 2 {
			t.Fatalf("%d entries after %d files, MaxEntries 2", c.Len(), i+1)
		}
	}
	c.mu.Lock()
	_, last := c.tables[procmaps.FileID{Inode: 5}]
	_, first := c.tables[procmaps.FileID{Inode: 1}]
	c.mu.Unlock()
	if !last || first {
		t.Errorf("last kept %v, first kept %v", last, first)
	}
}
