package python

import (
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/probekit/probekit/procmaps"
)

// TestFindCache: Find reads a file once for every process mapping it,
// the stub executable that is not CPython included, and gives each
// process its own addresses.
func TestFindCache(t *testing.T) {
	const py = "/root/.pyenv/versions/3.12.1/bin/python3.12"
	if _, err := os.Stat(py); err != nil {
		t.Skipf("no %s", py)
	}
	var ins []*Interpreter
	for range 2 {
		cmd := exec.Command(py, "-c", "import sys; print('up', flush=True); sys.stdin.read()")
		out, _ := cmd.StdoutPipe()
		stdin, _ := cmd.StdinPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait() })
		up := make(chan error, 1)
		go func() { _, err := out.Read(make([]byte, 1)); up <- err }()
		select {
		case <-up:
		case <-time.After(20 * time.Second):
			t.Fatal("no line within 20s")
		}
		p, err := procmaps.Open(cmd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		in, err := Find(p)
		if err != nil {
			t.Fatal(err)
		}
		defer in.Close()
		ins = append(ins, in)
	}
	files.Lock()
	var notPython, python int
	for _, fi := range files.m {
		if fi.notPython {
			notPython++
		} else if fi.version.Minor == 12 {
			python++
		}
	}
	files.Unlock()
	if python != 1 || notPython < 1 {
		t.Errorf("cache: %d entries of 3.12, %d not CPython; want 1 and at least 1 (the stub)", python, notPython)
	}
	if ins[0].Offsets != ins[1].Offsets || ins[0].Source != SourceDWARF || ins[1].Source != SourceDWARF {
		t.Errorf("offsets from %v and %v differ or are not DWARF's", ins[0].Source, ins[1].Source)
	}
	if len(ins[0].eval) != 2 {
		t.Errorf("eval ranges %#x, want _PyEval_EvalFrameDefault and its .cold part", ins[0].eval)
	}
	// Address randomization places libpython apart in each process; its
	// _PyRuntime keeps its offset from the code.
	if d0, d1 := ins[0].Runtime-ins[0].eval[0][0], ins[1].Runtime-ins[1].eval[0][0]; d0 != d1 {
		t.Errorf("_PyRuntime - _PyEval_EvalFrameDefault: %#x and %#x", d0, d1)
	}
}
