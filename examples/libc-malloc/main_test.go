package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/probekit/probekit/internal/test/testkit"
)

func TestMain(m *testing.M) { os.Exit(testkit.RunWithLeakCheck(m)) }

const python = "/usr/bin/python3.11"

// ctypesLibc gives Python libc's malloc and free (through ctypes).
const ctypesLibc = `import ctypes
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
`

// mallocs calls malloc with a size nothing else asks for, a known number
// of times.
const mallocs = ctypesLibc + `for _ in range(137):
    libc.free(libc.malloc(777777))
`

// A launched command's malloc calls are counted by size, exactly.
func TestCountLaunch(t *testing.T) {
	testkit.RequireKernel(t)
	if _, err := os.Stat(python); err != nil {
		testkit.Unavailable(t, "%s: %v", python, err)
	}
	sizes, err := count(context.Background(), 0, exec.Command(python, "-c", mallocs))
	if err != nil {
		t.Fatal(err)
	}
	if n := sizes[777777]; n != 137 {
		t.Errorf("malloc(777777) counted %d times, want 137", n)
	}
	if len(sizes) < 2 {
		t.Errorf("only %d sizes: the interpreter's own mallocs are missing", len(sizes))
	}
}

// -p: a running process is counted until ctx ends.
func TestCountPID(t *testing.T) {
	testkit.RequireKernel(t)
	if _, err := os.Stat(python); err != nil {
		testkit.Unavailable(t, "%s: %v", python, err)
	}
	// "ready" once the loop is about to start: under emulation the
	// interpreter's start took longer than the count's half second, which
	// then saw only its start's mallocs.
	cmd := exec.Command(python, "-c", ctypesLibc+"import time\nprint('ready', flush=True)\nwhile True:\n    libc.free(libc.malloc(555555))\n    time.sleep(0.005)\n")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(out).ReadString('\n')
		if err == nil && line != "ready\n" {
			err = fmt.Errorf("python printed %q", line)
		}
		ready <- err
	}()
	select {
	case err := <-ready:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("python not ready after 60 s")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	sizes, err := count(ctx, cmd.Process.Pid, nil)
	if err != nil {
		t.Fatal(err)
	}
	if sizes[555555] == 0 {
		t.Errorf("no malloc(555555) seen in pid %d: %v", cmd.Process.Pid, sizes)
	}
}
