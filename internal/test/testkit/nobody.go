package testkit

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
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

// NobodyUID is the uid (and gid) of nobody on Debian.
const NobodyUID = 65534

// StartAs starts argv as uid and gid in "/", and returns it with the first
// line it writes to standard output, read within d. It is killed and
// reaped when tb ends. A start that fails, or no line within d, fails tb
// with the command's standard error, read once the command is reaped.
func StartAs(tb testing.TB, uid int, d time.Duration, argv ...string) (*exec.Cmd, string) {
	tb.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	reap := sync.OnceFunc(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	tb.Cleanup(reap)
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		lines <- line
	}()
	select {
	case line := <-lines:
		if line == "" {
			reap() // Wait is done with stderr after it
			tb.Fatalf("%q wrote no line; stderr %q", argv, stderr.String())
		}
		return cmd, line
	case <-time.After(d):
		reap()
		tb.Fatalf("%q wrote no line within %v; stderr %q", argv, d, stderr.String())
	}
	return nil, ""
}

// JITScript is a Python program that maps a page of anonymous executable
// memory (what a JIT's code lives in), prints its address in hex and
// sleeps a minute.
const JITScript = `
import mmap, ctypes, time
m = mmap.mmap(-1, 4096, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
print("%x" % ctypes.addressof(ctypes.c_char.from_buffer(m)), flush=True)
time.sleep(60)
`

// Python311 returns the path of python3.11 (make deps installs it), or
// marks tb unavailable.
func Python311(tb testing.TB) string {
	tb.Helper()
	const py = "/usr/bin/python3.11"
	if _, err := os.Stat(py); err != nil {
		Unavailable(tb, "no python3.11 (make deps installs it): %v", err)
	}
	return py
}
