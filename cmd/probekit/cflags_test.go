package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/probekit/probekit/usdt/bpf"
)

func TestCflags(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "inc")
	code, out, stderr := runCmd("cflags", "-o", dir)
	if code != 0 || strings.TrimSpace(out) != "-I"+dir {
		t.Fatalf("exit %d, out %q, stderr %q", code, out, stderr)
	}
	got, err := os.ReadFile(filepath.Join(dir, "usdt.bpf.h"))
	if err != nil || !bytes.Equal(got, bpf.USDTHeader) {
		t.Fatalf("header: %v", err)
	}
	// Default: a directory per header version in the user cache.
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	code, out, _ = runCmd("cflags")
	inc := strings.TrimPrefix(strings.TrimSpace(out), "-I")
	if code != 0 || !strings.Contains(inc, filepath.Join("probekit", "include", headersVersion())) {
		t.Fatalf("default: exit %d, %q", code, out)
	}
	if _, err := os.Stat(filepath.Join(inc, "usdt.bpf.h")); err != nil {
		t.Fatal(err)
	}
	if code, _, _ := runCmd("cflags", "extra"); code != 2 {
		t.Errorf("extra argument: exit %d, want 2", code)
	}
}
