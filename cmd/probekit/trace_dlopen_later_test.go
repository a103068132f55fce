package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/probekit/probekit/internal/test/testkit"
)

// TestTraceProcessLaterDlopen: -p PID '*:sample:libonly' without -f, with
// no probe in the process at the start, attaches the library the process
// dlopens later and sees every hit, the ones right after the dlopen too
// (issue 36, item 2: the trace printed only its "missing" line).
func TestTraceProcessLaterDlopen(t *testing.T) {
	requirePython(t)
	lib := testkit.Fixture("libusdt_lib.so")
	load := filepath.Join(t.TempDir(), "load")
	// No sleep between the dlopen and the calls: the user's case.
	src := "import ctypes, os, time\nwhile not os.path.exists(" + quotePy(load) + "):\n    time.sleep(0.005)\n" +
		"lib = ctypes.CDLL(" + quotePy(lib) + ")\nfor i in range(6):\n    lib.usdt_lib_fire_libonly(i, 0)\n"
	// Not a child of this process, as a user's process is not
	// probekit's: the trace seizes it (a child of its own it watches).
	sh := exec.Command("/bin/sh", "-c", `"$0" -c "$1" </dev/null >/dev/null 2>&1 & echo $!`, followPython, src)
	sh.Stderr = os.Stderr
	b, err := sh.Output()
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("python's pid %q: %v", b, err)
	}
	defer syscall.Kill(pid, syscall.SIGKILL)
	// The trace starts once the child runs python (not Go's fork before
	// its exec).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if exe, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe"); exe == followPython {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("python not started within 10s")
		}
	}
	var out, errOut testkit.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run([]string{"trace", "--json", "-p", strconv.Itoa(pid), "*:sample:libonly"}, &out, &errOut)
	}()
	// Started: it says that nothing has the probe yet.
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(out.String(), `"kind":"missing"`); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("trace not started within 20s: %s%s", out.String(), errOut.String())
		}
	}
	if err := os.WriteFile(load, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("trace did not end with the process")
	}
	var args []string
	for _, l := range decodeFollow(t, out.String()) {
		if l.Kind == "usdt" && l.Name == "libonly" && l.PID == pid {
			args = append(args, string(l.Args[0]))
		}
	}
	// usdt_lib_fire_libonly(i) fires sample:libonly with 7*i.
	if got := strings.Join(args, ","); got != "0,7,14,21,28,35" {
		t.Fatalf("hits of sample:libonly with %s, want 0,7,14,21,28,35:\n%s%s", got, out.String(), errOut.String())
	}
}
