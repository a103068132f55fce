package debuginfo

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/probekit/probekit/internal/test/testkit"
)

// TestDebuginfodCacheRefused: a cache entry that is a symbolic link (to
// a root-owned copy of the right debug file), a cache directory of
// another user, a cache directory writable by others, or a cache file
// writable by others is refused with a CacheError warning: the debug
// file is not taken from it, and no server is asked. The old code took
// the symbolic link's target and the other user's file.
func TestDebuginfodCacheRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown to another user needs root")
	}
	obj := fixture("dbg_id")
	id := testkit.BuildID(t, obj)
	var asked atomic.Int32
	url := hostile(t, func(w http.ResponseWriter, r *http.Request) { asked.Add(1); http.NotFound(w, r) })
	target := copyTo(t, fixture("dbg_id.debug"), t.TempDir(), "root-owned.debug")
	for _, c := range []struct {
		name  string
		spoil func(t *testing.T, cache, entry string)
	}{
		{"entry a symbolic link", func(t *testing.T, cache, entry string) {
			must(t, os.Symlink(target, entry))
		}},
		{"directory of another user", func(t *testing.T, cache, entry string) {
			copyTo(t, fixture("dbg_id.debug"), filepath.Dir(entry), "debuginfo")
			must(t, os.Chown(cache, 65534, 65534))
		}},
		{"entry of another user", func(t *testing.T, cache, entry string) {
			copyTo(t, fixture("dbg_id.debug"), filepath.Dir(entry), "debuginfo")
			must(t, os.Chown(entry, 65534, 65534))
		}},
		{"directory writable by others", func(t *testing.T, cache, entry string) {
			copyTo(t, fixture("dbg_id.debug"), filepath.Dir(entry), "debuginfo")
			must(t, os.Chmod(filepath.Dir(entry), 0o777))
		}},
		{"entry writable by the group", func(t *testing.T, cache, entry string) {
			copyTo(t, fixture("dbg_id.debug"), filepath.Dir(entry), "debuginfo")
			must(t, os.Chmod(entry, 0o664))
		}},
		{"hex directory a symbolic link", func(t *testing.T, cache, entry string) {
			must(t, os.Remove(filepath.Dir(entry)))
			must(t, os.Symlink(filepath.Dir(target), filepath.Dir(entry)))
			copyTo(t, fixture("dbg_id.debug"), filepath.Dir(target), "debuginfo")
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			asked.Store(0)
			cache := filepath.Join(t.TempDir(), "cache")
			entry := filepath.Join(cache, id, "debuginfo")
			must(t, os.MkdirAll(filepath.Dir(entry), 0o755))
			c.spoil(t, cache, entry)
			d, warns, err := find(t, obj, &Options{DebugDirs: []string{t.TempDir()}, DebuginfodURLs: []string{url}, CacheDir: cache, Timeout: 5 * time.Second})
			var ce *CacheError
			if err == nil {
				t.Fatalf("found %s (%v) through a refused cache", d.Path, d.Source)
			}
			if len(warns) == 0 || !errors.As(warns[0], &ce) {
				t.Fatalf("warnings %v, want a CacheError", warns)
			}
			if n := asked.Load(); n != 0 {
				t.Errorf("server asked %d times with the cache refused", n)
			}
		})
	}
}

// TestDebuginfodCacheMissFIFO: a cache_miss_s that is a FIFO (no writer)
// or a symbolic link to /dev/zero does not block or grow the read: the
// default 600 s holds, and a recent miss is honoured (no server asked).
// The old code blocked on the FIFO and read /dev/zero without end.
func TestDebuginfodCacheMissFIFO(t *testing.T) {
	obj := fixture("dbg_id")
	id := testkit.BuildID(t, obj)
	var asked atomic.Int32
	url := hostile(t, func(w http.ResponseWriter, r *http.Request) { asked.Add(1); http.NotFound(w, r) })
	for _, kind := range []string{"fifo", "zero"} {
		cache := t.TempDir()
		must(t, os.MkdirAll(filepath.Join(cache, id), 0o700))
		must(t, os.WriteFile(filepath.Join(cache, id, "debuginfo"), nil, 0o600))
		miss := filepath.Join(cache, "cache_miss_s")
		if kind == "fifo" {
			must(t, syscall.Mkfifo(miss, 0o600))
		} else {
			must(t, os.Symlink("/dev/zero", miss))
		}
		done := make(chan error, 1)
		go func() {
			_, err := Find(open(t, obj), obj, &Options{DebugDirs: []string{t.TempDir()}, DebuginfodURLs: []string{url}, CacheDir: cache, Timeout: 5 * time.Second})
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, ErrNotFound) || asked.Load() != 0 {
				t.Errorf("%s cache_miss_s: %v, server asked %d times", kind, err, asked.Load())
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s cache_miss_s: Find still reading after 10 s", kind)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
