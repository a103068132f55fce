package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/probekit/probekit/internal/test/testkit"
)

// pyStackArgs are the probe and the command of a run of
// testdata/python/pystack.py under Debian's CPython 3.11 for seconds:
// pyfix_hit called through ctypes from outer -> middle -> inner.
func pyStackArgs(t *testing.T, seconds string) (probe string, command []string) {
	t.Helper()
	testkit.RequireKernel(t)
	testkit.SkipOnOldKernel(t, "6.18", "Python frames in --stack (the trace program with the Python walk: Debian's 6.1 verifier refuses it)")
	requireAMD64(t)
	const python = "/usr/bin/python3.11"
	if _, err := os.Stat(python); err != nil {
		testkit.Unavailable(t, "no %s", python)
	}
	script, err := filepath.Abs(filepath.Join(testkit.Root(), "testdata", "python", "pystack.py"))
	if err != nil {
		t.Fatal(err)
	}
	lib, err := filepath.Abs(testkit.Fixture("libpyfix.so"))
	if err != nil {
		t.Fatal(err)
	}
	return "uprobe:" + lib + ":pyfix_hit", []string{python, script, lib, filepath.Join(t.TempDir(), "calls.json"), seconds}
}

// probekit trace --stack prints a Python frame as its function, file:line
// and [python], between the native frames that called it and the eval
// loop that runs it.
func TestTracePythonStackText(t *testing.T) {
	probe, command := pyStackArgs(t, "1.5")
	r := runTraceCmd(append([]string{"--stack", probe, "--"}, command...)...)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.errOut)
	}
	script := regexp.QuoteMeta(command[1])
	want := regexp.MustCompile(`\n    0x[0-9a-f]+ _PyObject_MakeTpCall\+0x[0-9a-f]+ \(/usr/bin/python3\.11\)\n` +
		`    inner ` + script + `:41 \[python\]\n` +
		`    middle ` + script + `:48 \[python\]\n` +
		`    outer ` + script + `:60 \[python\]\n` +
		`    all_calls ` + script + `:64 \[python\]\n` +
		`    <module> ` + script + `:76 \[python\]\n` +
		`    0x[0-9a-f]+ _PyEval_EvalFrameDefault\+0x[0-9a-f]+ \(/usr/bin/python3\.11\)\n`)
	if !want.MatchString(r.out) {
		t.Errorf("no stack with inner, middle, outer among the native frames:\n%s", tail(r.out, 4000))
	}
}

// probekit trace --count --stack --pprof FILE: go tool pprof -traces
// shows the Python functions in order, inside the native frames;
// --folded the same path.
func TestTracePythonPprof(t *testing.T) {
	probe, command := pyStackArgs(t, "1.5")
	file := filepath.Join(t.TempDir(), "py.pprof")
	r := runTraceCmd(append([]string{"--count", "--stack", "--pprof", file, "--folded", probe, "--"}, command...)...)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.errOut)
	}
	if !strings.Contains(r.out, ";_PyEval_EvalFrameDefault;<module>;all_calls;outer;middle;inner;_PyObject_MakeTpCall;") {
		t.Errorf("--folded: no path through <module>, all_calls, outer, middle, inner:\n%s", tail(r.out, 4000))
	}
	gotool := filepath.Join(runtime.GOROOT(), "bin", "go")
	out, err := exec.Command(gotool, "tool", "pprof", "-traces", file).CombinedOutput()
	if err != nil {
		t.Fatalf("go tool pprof -traces: %v\n%s", err, out)
	}
	// A trace lists its functions innermost first, one per line.
	want := regexp.MustCompile(`(?m)^\s+(\d+\s+)?pyfix_hit\n(.*\n)*?\s+_PyObject_MakeTpCall\n\s+inner\n\s+middle\n\s+outer\n\s+all_calls\n\s+<module>\n\s+_PyEval_EvalFrameDefault\n`)
	if !want.Match(out) {
		t.Errorf("go tool pprof -traces: no trace with inner, middle, outer:\n%s", tail(string(out), 4000))
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
