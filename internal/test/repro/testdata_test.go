// Package repro checks that the committed generated files are what the
// Makefile's rules build from this tree.
package repro

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/probekit/probekit/internal/test/testkit"
)

// TestTestdataReproducible copies the tracked files into a directory of
// another name and length, runs `make testdata` there, and checks that
// every committed file under testdata/ and argspec/testdata/ comes out
// byte for byte as committed (absolute paths, dwz's checksums and the
// installed packages' versions once differed).
func TestTestdataReproducible(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every fixture: not with -short")
	}
	root := testkit.Root()
	ls, err := exec.Command("git", "-C", root, "ls-files", "-z").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	dir := filepath.Join(t.TempDir(), "another-checkout")
	var committed []string
	for _, name := range strings.Split(strings.TrimRight(string(ls), "\x00"), "\x00") {
		src := filepath.Join(root, name)
		fi, err := os.Lstat(src)
		if err != nil || !fi.Mode().IsRegular() {
			continue // deleted in the work tree, or a symlink
		}
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, fi.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(name, "testdata/") || strings.HasPrefix(name, "argspec/testdata/") {
			committed = append(committed, name)
		}
	}
	make := exec.Command("make", "-C", dir, "testdata")
	if out, err := make.CombinedOutput(); err != nil {
		t.Fatalf("make testdata: %v\n%s", err, out)
	}
	var differ []string
	for _, name := range committed {
		want, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || !bytes.Equal(got, want) {
			differ = append(differ, name)
		}
	}
	if len(differ) > 0 {
		t.Errorf("make testdata in another checkout changes %d committed files: %s", len(differ), strings.Join(differ, ", "))
	}
}
