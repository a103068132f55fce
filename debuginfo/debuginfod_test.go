package debuginfo

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/probekit/probekit/internal/test/testkit"
)

// startDebuginfod runs Debian's debuginfod over a directory holding
// files, on 127.0.0.1 and a free port, until the test ends; it returns
// the server's URL and a function that stops it, once ready to serve
// ready (a build ID of those files).
func startDebuginfod(t *testing.T, ready string, files ...string) (url string, stop func()) {
	t.Helper()
	bin, err := exec.LookPath("debuginfod")
	if err != nil {
		testkit.Unavailable(t, "debuginfod not installed (make deps): %v", err)
	}
	dir := t.TempDir()
	for _, f := range files {
		copyTo(t, f, dir, filepath.Base(f))
	}
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	var log bytes.Buffer
	cmd := exec.Command(bin, "-F", dir, "-p", fmt.Sprint(port), "-d", ":memory:")
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cmd.Process.Kill()
			cmd.Wait()
		}
	}
	t.Cleanup(stop)
	url = fmt.Sprintf("http://127.0.0.1:%d", port)
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := client.Get(url + "/buildid/" + ready + "/debuginfo")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return url, stop
			}
		}
		if time.Now().After(deadline) {
			stop()
			t.Fatalf("debuginfod did not serve %s within 30 s (last: %v)\n%s", ready, err, log.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestDebuginfodServer: a real debuginfod serves a stripped program's
// debug file; Find downloads it into the elfutils cache layout, and with
// the server gone finds it there. A build ID the server lacks is cached
// as a miss (an empty file).
func TestDebuginfodServer(t *testing.T) {
	obj := fixture("dbg_id")
	id := testkit.BuildID(t, obj)
	url, stop := startDebuginfod(t, id, fixture("dbg_id.debug"))
	cache := t.TempDir()
	opts := func() *Options {
		return &Options{DebugDirs: []string{t.TempDir()}, DebuginfodURLs: []string{url}, CacheDir: cache, Timeout: 10 * time.Second}
	}
	want := filepath.Join(cache, id, "debuginfo")
	d, warns, err := find(t, obj, opts())
	if err != nil || d.Source != SourceDebuginfod || d.Path != want || len(warns) != 0 {
		t.Fatalf("found %v (%v), warnings %v", d, err, warns)
	}
	got, err := os.ReadFile(want)
	if err != nil {
		t.Fatal(err)
	}
	orig, err := os.ReadFile(fixture("dbg_id.debug"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, orig) {
		t.Fatalf("cached %d bytes differ from the served file's %d", len(got), len(orig))
	}
	if st, err := os.Stat(want); err != nil || st.Mode().Perm() != 0o400 {
		t.Fatalf("cache file mode %v (%v), want 0400", st.Mode(), err)
	}
	if addr, ok := lookup(funcsOf(t, obj, opts()), "scale_static"); !ok || addr != testkit.FunctionValue(t, fixture("dbg_id.debug"), "scale_static") {
		t.Fatalf("scale_static through debuginfod: %#x %v", addr, ok)
	}

	// A program the server does not know: its miss is cached.
	dir := t.TempDir()
	other := copyTo(t, fixture("dbg_v4"), dir, "dbg_v4") // its debuglink's file is not there
	otherID := testkit.BuildID(t, other)
	if _, _, err := find(t, other, opts()); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown build ID: %v", err)
	}
	if st, err := os.Stat(filepath.Join(cache, otherID, "debuginfo")); err != nil || st.Size() != 0 {
		t.Fatalf("miss not cached as an empty file: %v %v", st, err)
	}

	stop()
	d, warns, err = find(t, obj, opts())
	if err != nil || d.Source != SourceDebuginfod || d.Path != want || len(warns) != 0 {
		t.Fatalf("with the server gone: %v (%v), warnings %v", d, err, warns)
	}
	// elfutils' own client finds the download in the same cache, the
	// server still gone: the layout is shared.
	// debuginfod-find ships in Debian's debuginfod package, as the
	// server does.
	cmd := exec.Command("debuginfod-find", "debuginfo", id)
	cmd.Env = append(os.Environ(), "DEBUGINFOD_CACHE_PATH="+cache, "DEBUGINFOD_URLS="+url)
	out, err := cmd.Output()
	if err != nil || strings.TrimSpace(string(out)) != want {
		t.Fatalf("debuginfod-find: %q, %v; want %s", out, err, want)
	}
}

// hostile serves handler on 127.0.0.1 until the test ends.
func hostile(t *testing.T, handler http.HandlerFunc) string {
	t.Helper()
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestDebuginfodHostile: a server that answers garbage, a huge body, a
// slow trickle, a redirect loop, another build's file or an error gets a
// clear error within the timeout and the size ceiling; nothing enters the
// cache and the caller goes on without debug information.
func TestDebuginfodHostile(t *testing.T) {
	obj := fixture("dbg_id")
	id := testkit.BuildID(t, obj)
	other, err := os.ReadFile(fixture("dbg_v4.debug"))
	if err != nil {
		t.Fatal(err)
	}
	const timeout = time.Second
	const maxSize = 1 << 20
	garbage := make([]byte, 64<<10)
	for i := range garbage {
		garbage[i] = byte(rand.Uint32())
	}
	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc
		want    string
	}{
		{"garbage", func(w http.ResponseWriter, r *http.Request) { w.Write(garbage) }, "not an ELF file"},
		{"huge body", func(w http.ResponseWriter, r *http.Request) {
			chunk := make([]byte, 64<<10)
			for r.Context().Err() == nil {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		}, "more than the 1048576 bytes allowed"},
		{"huge length", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", fmt.Sprint(1<<40))
			w.Write(garbage)
		}, "more than the 1048576 allowed"},
		{"slow trickle", func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte("\x7fELF"))
			for {
				select {
				case <-r.Context().Done():
					return
				case <-time.After(50 * time.Millisecond):
					w.Write([]byte{0})
					w.(http.Flusher).Flush()
				}
			}
		}, "timed out after 1s"},
		{"redirect loop", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, r.URL.Path, http.StatusFound)
		}, "redirects"},
		{"another build", func(w http.ResponseWriter, r *http.Request) { w.Write(other) }, "does not match"},
		{"server error", func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "boom", http.StatusInternalServerError)
		}, "500"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := hostile(t, tc.handler)
			cache := t.TempDir()
			opts := &Options{DebugDirs: []string{t.TempDir()}, DebuginfodURLs: []string{url}, CacheDir: cache, Timeout: timeout, MaxSize: maxSize}
			start := time.Now()
			d, warns, err := find(t, obj, opts)
			elapsed := time.Since(start)
			if !errors.Is(err, ErrNotFound) || d != nil {
				t.Fatalf("used: %v %v", d, err)
			}
			if len(warns) != 1 || !errors.Is(warns[0], ErrDebuginfod) || !strings.Contains(warns[0].Error(), tc.want) {
				t.Fatalf("warnings %v, want one ErrDebuginfod saying %q", warns, tc.want)
			}
			if elapsed > timeout+2*time.Second {
				t.Fatalf("took %v, the timeout is %v", elapsed, timeout)
			}
			left, _ := filepath.Glob(filepath.Join(cache, id, "*"))
			hidden, _ := filepath.Glob(filepath.Join(cache, id, ".*"))
			if len(left)+len(hidden) != 0 {
				t.Fatalf("left in the cache: %v %v", left, hidden)
			}
		})
	}
}

// TestDebuginfodMissCache: a 404 is cached as an empty file; while it is
// younger than cache_miss_s the server is not asked again; once older it
// is.
func TestDebuginfodMissCache(t *testing.T) {
	obj := fixture("dbg_id")
	id := testkit.BuildID(t, obj)
	var asked atomic.Int32
	url := hostile(t, func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		if r.URL.Path != "/buildid/"+id+"/debuginfo" {
			t.Errorf("asked for %s", r.URL.Path)
		}
		http.NotFound(w, r)
	})
	cache := t.TempDir()
	opts := &Options{DebugDirs: []string{t.TempDir()}, DebuginfodURLs: []string{url + "/"}, CacheDir: cache}
	for range 2 {
		if _, warns, err := find(t, obj, opts); !errors.Is(err, ErrNotFound) || len(warns) != 0 {
			t.Fatalf("%v, warnings %v", err, warns)
		}
	}
	if n := asked.Load(); n != 1 {
		t.Fatalf("server asked %d times, want once (the miss is cached)", n)
	}
	if err := os.WriteFile(filepath.Join(cache, "cache_miss_s"), []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)
	find(t, obj, opts)
	if n := asked.Load(); n != 2 {
		t.Fatalf("server asked %d times after the miss expired, want twice", n)
	}
}

// TestDebuginfodOff: nothing is fetched unless servers are named, and
// Offline wins over them.
func TestDebuginfodOff(t *testing.T) {
	var asked atomic.Int32
	url := hostile(t, func(w http.ResponseWriter, r *http.Request) { asked.Add(1); http.NotFound(w, r) })
	t.Setenv("DEBUGINFOD_URLS", "")
	cache := t.TempDir()
	find(t, fixture("dbg_id"), &Options{DebugDirs: []string{t.TempDir()}, CacheDir: cache})
	find(t, fixture("dbg_id"), &Options{DebugDirs: []string{t.TempDir()}, CacheDir: cache, DebuginfodURLs: []string{url}, Offline: true})
	if asked.Load() != 0 {
		t.Fatal("a server was asked")
	}
	t.Setenv("DEBUGINFOD_URLS", "http://127.0.0.1:1 "+url)
	find(t, fixture("dbg_id"), &Options{DebugDirs: []string{t.TempDir()}, CacheDir: cache, Timeout: 5 * time.Second})
	if asked.Load() != 1 {
		t.Fatalf("$DEBUGINFOD_URLS: asked %d times", asked.Load())
	}
}
