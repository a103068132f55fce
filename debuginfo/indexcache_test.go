package debuginfo

import (
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/probekit/probekit/internal/test/testkit"
)

func testKey(id string) *IndexKey {
	return &IndexKey{BuildID: []byte(id), DebugID: []byte(id), DebugSize: 1234, SupSize: -1, Digest: []byte("digest of " + id)}
}

// TestIndexCacheRoundTrip: Store writes DIR/lines/HEX (directories 0700,
// the file 0600, no temporary file left) and Load maps it back with the
// same answers; another key (another debug file size, a supplementary
// file) is ErrIndexKey, no index os.ErrNotExist.
func TestIndexCacheRoundTrip(t *testing.T) {
	l := openFixtureLines(t, "lines_dwz", "lines_dwz.sup")
	base := filepath.Join(t.TempDir(), "probekit")
	c, err := NewIndexCache(base)
	if err != nil {
		t.Fatal(err)
	}
	k := testKey("\x01\x02")
	if _, err := c.Load(k); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("empty cache: %v, want ErrNotExist", err)
	}
	stored, err := c.Store(k, l, nil)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(base, "lines", "0102")
	for p, mode := range map[string]os.FileMode{base: 0o700 | os.ModeDir, filepath.Dir(path): 0o700 | os.ModeDir, path: 0o600} {
		st, err := os.Lstat(p)
		if err != nil || st.Mode() != mode {
			t.Errorf("%s: %v %v, want mode %v", p, st.Mode(), err, mode)
		}
	}
	if ents, _ := os.ReadDir(filepath.Dir(path)); len(ents) != 1 {
		t.Errorf("%d files in the cache, want 1", len(ents))
	}
	x, err := c.Load(k)
	if err != nil {
		t.Fatal(err)
	}
	lo, hi := textRange(t, linesFixture("lines_dwz"))
	for pc := lo; pc < hi; pc++ {
		a, _ := x.Frames(nil, pc)
		b, _ := stored.Frames(nil, pc)
		if !reflect.DeepEqual(a, b) || !sameFrames(t, x, l, pc) {
			t.Fatalf("%#x: loaded %+v, stored %+v", pc, a, b)
		}
	}
	for _, other := range []*IndexKey{
		{BuildID: k.BuildID, DebugID: k.DebugID, DebugSize: 1235, SupSize: -1, Digest: k.Digest},
		{BuildID: k.BuildID, DebugID: k.DebugID, DebugSize: 1234, SupID: []byte{9}, SupSize: 10, Digest: k.Digest},
		{BuildID: k.BuildID, DebugID: []byte{7}, DebugSize: 1234, SupSize: -1, Digest: k.Digest},
		// Same build IDs and sizes, other section bytes.
		{BuildID: k.BuildID, DebugID: k.DebugID, DebugSize: 1234, SupSize: -1, Digest: []byte("other digest")},
	} {
		if _, err := c.Load(other); !errors.Is(err, ErrIndexKey) {
			t.Errorf("key %+v: %v, want ErrIndexKey", other, err)
		}
	}
	if _, err := c.Load(&IndexKey{}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("no build ID: %v, want ErrNotExist", err)
	}
}

// TestIndexCacheRefused: a cache directory or index file that is
// writable by others, owned by another user, a symbolic link or not a
// regular file is refused with an IndexCacheError naming it; a corrupt
// file is an IndexError, and a Store replaces it.
func TestIndexCacheRefused(t *testing.T) {
	l := openFixtureLines(t, "lines_c_v5", "")
	k := testKey("\xab")
	setup := func(t *testing.T) (*IndexCache, string) {
		c, err := NewIndexCache(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Store(k, l, nil); err != nil {
			t.Fatal(err)
		}
		return c, filepath.Join(c.Dir(), "ab")
	}
	var ce *IndexCacheError
	for _, tc := range []struct {
		name  string
		spoil func(t *testing.T, c *IndexCache, path string)
	}{
		{"directory writable by others", func(t *testing.T, c *IndexCache, path string) { os.Chmod(c.Dir(), 0o777) }},
		{"file writable by the group", func(t *testing.T, c *IndexCache, path string) { os.Chmod(path, 0o620) }},
		{"file a symbolic link", func(t *testing.T, c *IndexCache, path string) {
			os.Rename(path, path+".real")
			os.Symlink(path+".real", path)
		}},
		{"directory a symbolic link", func(t *testing.T, c *IndexCache, path string) {
			os.Rename(c.Dir(), c.Dir()+".real")
			os.Symlink(c.Dir()+".real", c.Dir())
		}},
		{"file a directory", func(t *testing.T, c *IndexCache, path string) {
			os.Remove(path)
			os.Mkdir(path, 0o700)
		}},
		{"file of another user", func(t *testing.T, c *IndexCache, path string) {
			if os.Geteuid() != 0 {
				t.Skip("chown needs root")
			}
			os.Chown(path, testkit.NobodyUID, testkit.NobodyUID)
		}},
		{"directory of another user", func(t *testing.T, c *IndexCache, path string) {
			if os.Geteuid() != 0 {
				t.Skip("chown needs root")
			}
			os.Chown(c.Dir(), testkit.NobodyUID, testkit.NobodyUID)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, path := setup(t)
			tc.spoil(t, c, path)
			if _, err := c.Load(k); !errors.As(err, &ce) {
				t.Fatalf("%v, want an IndexCacheError", err)
			} else {
				t.Log(err)
			}
		})
	}
	t.Run("corrupt", func(t *testing.T) {
		c, path := setup(t)
		b, _ := os.ReadFile(path)
		b[len(b)/2] ^= 1
		os.WriteFile(path, b, 0o600)
		var ie *IndexError
		if _, err := c.Load(k); !errors.As(err, &ie) {
			t.Fatalf("%v, want an IndexError", err)
		}
		if _, err := c.Store(k, l, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Load(k); err != nil {
			t.Fatalf("rebuilt: %v", err)
		}
	})
}

// TestIndexCacheConcurrent: stores and loads of one build ID at the same
// time: every load gets a whole index (or none yet), never a mixed or
// partial one.
func TestIndexCacheConcurrent(t *testing.T) {
	l := openFixtureLines(t, "lines_cc_v5", "")
	c, err := NewIndexCache(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	k := testKey("\x42")
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for range 4 {
		wg.Go(func() {
			for range 5 {
				if _, err := c.Store(k, l, nil); err != nil {
					errs <- err
				}
			}
		})
		wg.Go(func() {
			for range 20 {
				if _, err := c.Load(k); err != nil && !errors.Is(err, os.ErrNotExist) {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if ents, _ := os.ReadDir(c.Dir()); len(ents) != 1 {
		t.Errorf("%d files in the cache, want 1 (no temporary file left)", len(ents))
	}
}

// TestIndexCacheEviction: past MaxBytes a Store removes the index used
// least recently (a Load counts as a use), never the one it wrote, and a
// temporary file a crash left an hour ago; other files stay.
func TestIndexCacheEviction(t *testing.T) {
	l := openFixtureLines(t, "lines_dwz", "lines_dwz.sup")
	base := filepath.Join(t.TempDir(), "probekit")
	c, err := NewIndexCache(base)
	if err != nil {
		t.Fatal(err)
	}
	dir := c.Dir()
	store := func(id string) {
		t.Helper()
		if _, err := c.Store(testKey(id), l, nil); err != nil {
			t.Fatal(err)
		}
	}
	// Three indexes, each last used a minute after the one before.
	for i, id := range []string{"\x01", "\x02", "\x03"} {
		store(id)
		when := time.Now().Add(time.Duration(i-10) * time.Minute)
		if err := os.Chtimes(filepath.Join(dir, hex.EncodeToString([]byte(id))), when, when); err != nil {
			t.Fatal(err)
		}
	}
	st, err := os.Stat(filepath.Join(dir, "01"))
	if err != nil {
		t.Fatal(err)
	}
	size := st.Size()
	// 01 used again: 02 is now the least recently used.
	if _, err := c.Load(testKey("\x01")); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(dir, ".05.tmp0011223344556677")
	other := filepath.Join(dir, "README")
	for _, p := range []string{stale, other} {
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-2 * time.Hour)
	os.Chtimes(stale, old, old)
	// Room for three indexes: the fourth Store removes one.
	c.MaxBytes = 3 * size
	store("\x04")
	var names []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if want := []string{"01", "03", "04", "README"}; !reflect.DeepEqual(names, want) {
		t.Errorf("cache holds %v, want %v", names, want)
	}
}
