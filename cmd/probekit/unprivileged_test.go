package main

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/probekit/probekit/internal/test/testkit"
)

// runAsNobody runs bin ARGS as nobody with no capability and no $HOME
// (asNobody) and returns its exit status, stdout and stderr.
func runAsNobody(t *testing.T, bin string, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := asNobody(bin, nil, args...)
	cmd.Env = append(cmd.Env, env...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	timer := time.AfterFunc(time.Minute, func() { cmd.Process.Kill() })
	defer timer.Stop()
	if err := cmd.Run(); err != nil && cmd.ProcessState == nil {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
}

// TestUnprivilegedCommands: the work that needs no privilege runs as
// nobody without any capability, and without a home: list FILE, list -p
// of its own process, symbolize -e FILE (which says once that it runs
// without a disk cache), cflags (which says once where it put the
// headers); with systemd's $CACHE_DIRECTORY, cflags uses it.
func TestUnprivilegedCommands(t *testing.T) {
	testkit.RequireKernel(t) // root, to run the commands as nobody
	bin := buildProbekit(t)
	fx := filepath.Join(testkit.SharedTempDir(t), "usdt_sample")
	testkit.CopyFile(t, testkit.Fixture("usdt_sample"), fx)
	if err := os.Chmod(fx, 0o755); err != nil {
		t.Fatal(err)
	}

	if code, out, errOut := runAsNobody(t, bin, nil, "list", fx); code != 0 || !strings.Contains(out, "sample:loop") || errOut != "" {
		t.Errorf("list FILE: exit %d, stdout %q, stderr %q", code, out, errOut)
	}

	// The fixture as nobody, waiting on its stdin (open until the end).
	own := asNobody(fx, nil)
	stdin, err := own.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	ready, err := own.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := own.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		own.Process.Kill()
		own.Wait()
	})
	if line, err := bufio.NewReader(ready).ReadString('\n'); !strings.HasPrefix(line, "ready ") {
		t.Fatalf("fixture as nobody: %q, %v", line, err)
	}
	if code, out, errOut := runAsNobody(t, bin, nil, "list", "-p", strconv.Itoa(own.Process.Pid), "sample:loop"); code != 0 || !strings.Contains(out, "sample:loop") || errOut != "" {
		t.Errorf("list -p of nobody's process: exit %d, stdout %q, stderr %q", code, out, errOut)
	}

	addr, _ := testkit.SymbolOffset(t, fx, "fire_loop")
	code, out, errOut := runAsNobody(t, bin, nil, "symbolize", "-e", fx, "0x"+strconv.FormatUint(addr, 16))
	// Without a cache directory, the line index cache is off, said once.
	if code != 0 || !strings.Contains(out, "fire_loop") || strings.Count(errOut, "\n") != 1 || strings.Count(errOut, "running without a disk cache") != 1 {
		t.Errorf("symbolize -e FILE: exit %d, stdout %q, stderr %q", code, out, errOut)
	}

	code, out, errOut = runAsNobody(t, bin, nil, "cflags")
	inc, _, _ := strings.Cut(strings.TrimPrefix(out, "-I"), " ")
	if inc != "" {
		t.Cleanup(func() { os.RemoveAll(inc) })
	}
	if code != 0 || !strings.HasPrefix(inc, filepath.Join(os.TempDir(), "probekit-include-")) ||
		strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "no cache directory") || !strings.Contains(errOut, inc) {
		t.Fatalf("cflags: exit %d, stdout %q, stderr %q; want a temporary directory, said once", code, out, errOut)
	}
	if _, err := os.Stat(filepath.Join(inc, "usdt.bpf.h")); err != nil {
		t.Error(err)
	}
	// A systemd service's CacheDirectory=, for a DynamicUser.
	cache := testkit.SharedTempDir(t)
	if err := os.Chown(cache, testkit.NobodyUID, testkit.NobodyUID); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runAsNobody(t, bin, []string{"CACHE_DIRECTORY=" + cache}, "cflags")
	if code != 0 || !strings.HasPrefix(out, "-I"+filepath.Join(cache, "include")+"/") || errOut != "" {
		t.Errorf("cflags with $CACHE_DIRECTORY: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}
