package main

import (
	"debug/elf"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/probekit/probekit/internal/test/testkit"
)

// symbolizeText runs the symbolize command over addrs on stdin.
func symbolizeText(t *testing.T, addrs string, args ...string) (string, string) {
	t.Helper()
	symbolizeStdin = strings.NewReader(addrs)
	defer func() { symbolizeStdin = os.Stdin }()
	code, out, stderr := runCmd(append([]string{"symbolize"}, args...)...)
	if code != 0 {
		t.Fatalf("symbolize %q: exit %d: %s", args, code, stderr)
	}
	return out, stderr
}

// TestSymbolizeCache: symbolize -e with file:line and inlined frames
// prints the same bytes without the line index (--no-cache), when it
// builds it (the first run with --cache-dir) and when it reads it (the
// second), over 3,000 random libc addresses with libc6-dbg's DWARF and
// every address of a dwz'd fixture's .text; the index is DIR/lines/HEX,
// 0600. A cache directory writable by others is refused with a warning
// and the output is the same.
func TestSymbolizeCache(t *testing.T) {
	const libc = testkit.Libc
	if _, err := os.Stat("/usr/lib/debug/.build-id"); err != nil {
		if os.Getenv("PROBEKIT_REQUIRE_KERNEL") != "" {
			t.Fatalf("libc6-dbg missing (make deps installs it): %v", err)
		}
		t.Skipf("libc6-dbg not installed: %v", err)
	}
	for _, c := range []struct {
		path string
		n    int // random addresses of .text, 0 for all
	}{{libc, 3000}, {filepath.Join("..", "..", "testdata", "lines", "bin", "lines_dwz"), 0}} {
		ef, err := elf.Open(c.path)
		if err != nil {
			t.Fatal(err)
		}
		text := ef.Section(".text")
		ef.Close()
		var in strings.Builder
		if c.n == 0 {
			for a := text.Addr; a < text.Addr+text.Size; a++ {
				fmt.Fprintf(&in, "%x\n", a)
			}
		} else {
			rng := rand.New(rand.NewPCG(8, 9))
			for range c.n {
				fmt.Fprintf(&in, "%x\n", text.Addr+rng.Uint64N(text.Size))
			}
		}
		cache := t.TempDir()
		want, _ := symbolizeText(t, in.String(), "--no-cache", "-e", c.path)
		built, _ := symbolizeText(t, in.String(), "--cache-dir", cache, "-e", c.path)
		read, _ := symbolizeText(t, in.String(), "--cache-dir", cache, "-e", c.path)
		if built != want || read != want {
			t.Fatalf("%s: output differs with the line index (built: %v, read: %v)", c.path, built == want, read == want)
		}
		if !strings.Contains(want, " (inlined) ") || !strings.Contains(want, ".c:") {
			t.Fatalf("%s: no inlined frame or no file:line:\n%.500s", c.path, want)
		}
		ents, err := os.ReadDir(filepath.Join(cache, "lines"))
		if err != nil || len(ents) != 1 {
			t.Fatalf("%s: cache holds %v (%v)", c.path, ents, err)
		}
		if st, err := os.Stat(filepath.Join(cache, "lines", ents[0].Name())); err != nil || st.Mode() != 0o600 {
			t.Fatalf("%s: index mode %v (%v)", c.path, st.Mode(), err)
		}
		t.Logf("%s: %d lines of output, index %s", c.path, strings.Count(want, "\n"), ents[0].Name())
		if c.path != libc {
			continue
		}
		if err := os.Chmod(filepath.Join(cache, "lines"), 0o777); err != nil {
			t.Fatal(err)
		}
		refused, stderr := symbolizeText(t, in.String(), "--cache-dir", cache, "-e", c.path)
		if refused != want || !strings.Contains(stderr, "writable by others") {
			t.Fatalf("cache writable by others: output same %v, stderr %q", refused == want, stderr)
		}
	}
	if code, _, stderr := runCmd("symbolize", "--no-cache", "--cache-dir", "/tmp", "-e", libc, "0"); code != 2 {
		t.Errorf("--no-cache with --cache-dir: exit %d (%s), want 2", code, stderr)
	}
}
