package testkit

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// SharedTempDir returns a new temporary directory that other users (a
// test re-run as nobody) can enter: it and its parents below
// os.TempDir() get mode 0755 (Go makes them 0700). os.TempDir() itself
// is left alone: /tmp must stay 1777, sticky and writable by all.
func SharedTempDir(tb testing.TB) string {
	tb.Helper()
	dir := tb.TempDir()
	top := filepath.Clean(os.TempDir())
	for d := dir; d != top && strings.HasPrefix(d, top+"/"); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			tb.Fatal(err)
		}
	}
	return dir
}
