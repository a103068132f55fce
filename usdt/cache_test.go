package usdt

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/probekit/probekit/internal/test/testkit"
)

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	tmp := dst + ".tmp"
	if err := os.WriteFile(tmp, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		t.Fatal(err)
	}
}

func TestCacheIdentity(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	copyFile(t, testkit.Fixture("usdt_sample"), bin)
	link := filepath.Join(dir, "link")
	if err := os.Symlink(bin, link); err != nil {
		t.Fatal(err)
	}
	hard := filepath.Join(dir, "hard")
	if err := os.Link(bin, hard); err != nil {
		t.Fatal(err)
	}
	c := NewCache()
	a, err := c.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{link, hard, bin} {
		b, err := c.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		if &b.Probes[0] != &a.Probes[0] || b.Path != p {
			t.Errorf("%s: not the cached entry (path %q)", p, b.Path)
		}
	}
	if c.Len() != 1 {
		t.Errorf("%d entries, want 1", c.Len())
	}

	// Replaced by rename: a new inode, parsed again.
	copyFile(t, testkit.Fixture("usdt_sample_aarch64"), bin)
	r, err := c.Open(link)
	if err != nil {
		t.Fatal(err)
	}
	if r.Machine != elf.EM_AARCH64 {
		t.Errorf("replaced binary: machine %v, want aarch64", r.Machine)
	}
	// hard still names the old inode, which is still cached.
	if h, _ := c.Open(hard); h == nil || h.Machine != elf.EM_X86_64 {
		t.Errorf("old inode: %+v", h)
	}

	// Rewritten in place (same inode, new size and mtime): parsed again.
	x86, err := os.ReadFile(testkit.Fixture("usdt_sample_s390x"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(hard, x86, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chtimes(hard, time.Now(), time.Now().Add(time.Hour))
	if h, err := c.Open(hard); err != nil || h.Machine != elf.EM_S390 {
		t.Errorf("rewritten in place: %v, %v", h, err)
	}
	if c.Len() != 2 {
		t.Errorf("%d entries, want 2 (one per inode)", c.Len())
	}
}

func TestCacheErrors(t *testing.T) {
	c := NewCache()
	if _, err := c.Open(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing: %v", err)
	}
	for range 2 {
		if _, err := c.Open(testkit.Fixture("malloc_user")); !errors.Is(err, ErrNoProbes) {
			t.Errorf("no probes: %v", err)
		}
	}
}

// TestCacheConcurrent is meant for -race: many goroutines open a handful
// of files, through several paths, and look probes up.
func TestCacheConcurrent(t *testing.T) {
	dir := t.TempDir()
	names := []string{"usdt_sample", "usdt_sample_aarch64", "usdt_sample_s390x", "libusdt_lib.so"}
	var paths []string
	for _, n := range names {
		p := filepath.Join(dir, n)
		copyFile(t, testkit.Fixture(n), p)
		l := p + ".link"
		if err := os.Symlink(p, l); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p, l)
	}
	c := NewCache()
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				p := paths[(g+i)%len(paths)]
				f, err := c.Open(p)
				if err != nil {
					t.Error(err)
					return
				}
				if len(f.Match("*:*")) == 0 || f.Path != p {
					t.Errorf("%s: %d probes, path %q", p, len(f.Probes), f.Path)
				}
				if filepath.Base(p) != "libusdt_lib.so" && filepath.Base(p) != "libusdt_lib.so.link" {
					if _, err := f.Find("sample", "sema"); err != nil {
						t.Error(err)
					}
				}
			}
		}()
	}
	wg.Wait()
	if c.Len() != len(names) {
		t.Errorf("%d entries, want %d", c.Len(), len(names))
	}
}

// The cache stays within its bound; an evicted file is parsed again when
// asked for.
func TestCacheBound(t *testing.T) {
	c := NewCache()
	c.max = 3
	dir := t.TempDir()
	data, err := os.ReadFile(testkit.Fixture("usdt_sample"))
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for i := 0; i < 5; i++ {
		p := filepath.Join(dir, fmt.Sprintf("copy%d", i))
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
		if _, err := c.Open(p); err != nil {
			t.Fatal(err)
		}
		if n := c.Len(); n > 3 {
			t.Fatalf("%d entries after %d files, bound 3", n, i+1)
		}
	}
	for _, p := range paths {
		f, err := c.Open(p)
		if err != nil || len(f.Probes) == 0 || f.Path != p {
			t.Fatalf("%s after eviction: %v", p, err)
		}
	}
	if n := c.Len(); n != 3 {
		t.Fatalf("%d entries, want the bound 3", n)
	}
}
