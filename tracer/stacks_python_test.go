package tracer_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/probe"
	"github.com/probekit/probekit/profile"
	"github.com/probekit/probekit/record"
	"github.com/probekit/probekit/tracer"
)

// pyCall is one line of testdata/python/pystack.py: the stack
// traceback.extract_stack() gave at a call of pyfix_hit(N), innermost
// first, as [qualified name, file, line].
type pyCall struct {
	N      int      `json:"n"`
	Thread string   `json:"thread"`
	Frames [][3]any `json:"frames"`
}

func (c pyCall) frame(i int) (string, string, int) {
	f := c.Frames[i]
	return f[0].(string), f[1].(string), int(f[2].(float64))
}

// pyStackRun is a launched run of pystack.py for seconds under python:
// its calls, by N.
type pyStackRun struct {
	script, lib, out string
	args             []string
}

func newPyStackRun(t *testing.T, python string, seconds float64) *pyStackRun {
	t.Helper()
	testkit.RequireKernel(t)
	testkit.SkipOnOldKernel(t, "6.18", "Python frames in --stack (the trace program with the Python walk: Debian's 6.1 verifier refuses it)")
	if runtime.GOARCH != "amd64" {
		testkit.Unavailable(t, "the CFI walk and the Pythons of this machine are x86-64")
	}
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
	out := filepath.Join(t.TempDir(), "calls.json")
	return &pyStackRun{script: script, lib: lib, out: out,
		args: []string{python, script, lib, out, fmt.Sprint(seconds)}}
}

// calls reads what the script wrote.
func (r *pyStackRun) calls(t *testing.T) map[int]pyCall {
	t.Helper()
	f, err := os.Open(r.out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	calls := map[int]pyCall{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var c pyCall
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatalf("%q: %v", sc.Text(), err)
		}
		calls[c.N] = c
	}
	if len(calls) != 6 {
		t.Fatalf("the script wrote %d calls, want 6", len(calls))
	}
	return calls
}

func (r *pyStackRun) probe() probe.Spec {
	return probe.Spec{Kind: record.KindUprobe, Target: r.lib, Func: "pyfix_hit"}
}

// stackFrame is a frame of a printed --json stack.
type stackFrame struct {
	Address  uint64 `json:"address"`
	Function string `json:"function"`
	Object   string `json:"object"`
	File     string `json:"file"`
	Line     int    `json:"line"`
	Runtime  string `json:"runtime"`
	Inlined  bool   `json:"inlined"`
}

type stackHit struct {
	PID       int          `json:"pid"`
	TID       int          `json:"tid"`
	Args      []int64      `json:"args"`
	Stack     []stackFrame `json:"stack"`
	Truncated string       `json:"truncated"`
}

// checkPyStack checks a merged stack against the script's own view of
// the call: the Python frames are extract_stack's, frame by frame; each
// run of them stands directly before the eval-loop frame that runs it;
// the probed function is innermost, and with a C callback (N 5 and 6)
// pyfix_call stands between the callback's Python frames and the
// caller's: native, Python, native, Python.
func checkPyStack(t *testing.T, what string, frames []stackFrame, c pyCall) {
	t.Helper()
	var py []stackFrame
	idx := map[string]int{}
	for i, f := range frames {
		if f.Runtime == "python" {
			py = append(py, f)
			if _, ok := idx[f.Function]; !ok {
				idx[f.Function] = i
			}
			// The next native frame, past those inlined into it.
			j := i + 1
			for j < len(frames) && frames[j].Inlined {
				j++
			}
			if j < len(frames) && frames[i+1].Runtime == "" && frames[j].Function != "_PyEval_EvalFrameDefault" {
				t.Errorf("%s: Python frame %s is followed by %s, not the eval loop", what, f.Function, frames[j].Function)
			}
		} else if _, ok := idx[f.Function]; !ok && f.Function != "" {
			idx[f.Function] = i
		}
	}
	if len(py) != len(c.Frames) {
		t.Errorf("%s: %d Python frames, want %d:\n%s", what, len(py), len(c.Frames), showFrames(frames))
	}
	for i := range min(len(py), len(c.Frames)) {
		name, file, line := c.frame(i)
		if py[i].Function != name || py[i].File != file || py[i].Line != line {
			t.Errorf("%s: Python frame %d is %s %s:%d, want %s %s:%d", what, i, py[i].Function, py[i].File, py[i].Line, name, file, line)
		}
	}
	if len(frames) == 0 || frames[0].Function != "pyfix_hit" {
		t.Errorf("%s: innermost frame is not pyfix_hit:\n%s", what, showFrames(frames))
	}
	if i, ok := idx["inner"]; !ok || i < 2 {
		t.Errorf("%s: inner at %d, want after pyfix_hit and the native frames that called it", what, i)
	}
	if c.N == 5 || c.N == 6 {
		// inner, callback, then the lambda: "<lambda>" before 3.11,
		// which names code by co_name.
		name, _, _ := c.frame(min(2, len(c.Frames)-1))
		lambda, okL := idx[name]
		call, okC := idx["pyfix_call"]
		middle, okM := idx["middle"]
		if !okL || !okC || !okM || !(lambda < call && call < middle) {
			t.Errorf("%s: <lambda> at %d, pyfix_call at %d, middle at %d: want C -> Python -> C -> Python:\n%s", what, lambda, call, middle, showFrames(frames))
		}
	}
}

func showFrames(frames []stackFrame) string {
	var b strings.Builder
	for _, f := range frames {
		fmt.Fprintf(&b, "    %#x %s %s %s:%d %s\n", f.Address, f.Function, f.Object, f.File, f.Line, f.Runtime)
	}
	return b.String()
}

// probekit trace --stack --json at a fixture function called from
// Debian's CPython 3.11 through ctypes: with the GIL held (PyDLL) and
// released (CDLL), on the main thread and on a threading.Thread, and
// from a Python callback that C calls. Every stack names the script's
// functions, files and lines as traceback.extract_stack() does at the
// same call, placed at the eval-loop frames among the native ones.
func TestKernelStackPython(t *testing.T) {
	for _, py := range []string{"/usr/bin/python3.11", "/root/.pyenv/versions/3.13.0/bin/python3.13",
		"/root/.pyenv/versions/3.12.1/bin/python3.12", "/root/.pyenv/versions/3.10.13/bin/python3.10",
		"/root/.pyenv/versions/3.8.18/bin/python3.8"} {
		t.Run(filepath.Base(py), func(t *testing.T) { testStackPython(t, py) })
	}
}

// testStackPython is TestKernelStackPython under one Python (pyenv's
// builds besides Debian's: 3.8 to 3.10 run each Python frame in an
// eval-loop call of its own, 3.12 and 3.13 mark runs by shim frames).
func testStackPython(t *testing.T, python string) {
	r := newPyStackRun(t, python, 2)
	var out, warn testkit.Buffer
	cfg := &tracer.Config{Probes: []probe.Spec{r.probe()}, Stack: true, JSON: true,
		Command: r.args, Output: &out, Warnings: &warn}
	if err := tracer.Run(context.Background(), cfg); err != nil {
		t.Fatalf("Run: %v (%s)", err, warn.String())
	}
	calls := r.calls(t)
	// The last hit of each call: the tables of the libraries ctypes
	// loads (libffi) are read at the next refresh, a second on.
	last := map[int]stackHit{}
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var h stackHit
		if err := json.Unmarshal([]byte(l), &h); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		if len(h.Args) > 0 {
			last[int(h.Args[0])] = h
		}
	}
	for n := 1; n <= 6; n++ {
		h, ok := last[n]
		if !ok {
			t.Errorf("no hit of call %d", n)
			continue
		}
		what := fmt.Sprintf("call %d (%s)", n, calls[n].Thread)
		if h.Truncated != "" {
			t.Errorf("%s: truncated: %s\n%s", what, h.Truncated, showFrames(h.Stack))
		}
		if (calls[n].Thread == "worker") != (h.TID != h.PID) {
			t.Errorf("%s: hit on tid %d of pid %d", what, h.TID, h.PID)
		}
		checkPyStack(t, what, h.Stack, calls[n])
	}
	if t.Failed() {
		t.Logf("warnings: %s", warn.String())
	}
}

// probekit trace --count --stack, as a profile (OnProfile): each
// distinct Python stack is a sample of its own even where the native
// frames are the same, and each Python frame is a pprof function with
// its file and a line.
func TestKernelStackPythonCount(t *testing.T) {
	r := newPyStackRun(t, "/usr/bin/python3.11", 2.5)
	keys, err := tracer.ParseKeys("stack")
	if err != nil {
		t.Fatal(err)
	}
	var warn testkit.Buffer
	var got *profile.Profile
	cfg := &tracer.Config{Probes: []probe.Spec{r.probe()}, Mode: record.ModeCount, Keys: keys, Stack: true,
		Command: r.args, Warnings: &warn, OnProfile: func(p *profile.Profile) error { got = p; return nil }}
	if err := tracer.Run(context.Background(), cfg); err != nil {
		t.Fatalf("Run: %v (%s)", err, warn.String())
	}
	calls := r.calls(t)
	if got == nil {
		t.Fatal("no profile")
	}
	// Per call, the sample whose Python frames are the call's, with the
	// most native frames (the first hits came before libffi's tables
	// were read: cut short, and counted apart).
	best := map[int][]stackFrame{}
	for _, s := range got.Sample {
		var frames []stackFrame
		for _, loc := range s.Location {
			for j, ln := range loc.Line {
				f := stackFrame{Address: loc.Address, Function: ln.Function.Name, File: ln.Function.Filename, Line: int(ln.Line),
					Inlined: j < len(loc.Line)-1}
				if loc.Address == 0 && loc.Mapping == nil && strings.HasSuffix(f.File, ".py") {
					f.Runtime = "python"
				}
				frames = append(frames, f)
			}
		}
		for n, c := range calls {
			if pyMatches(frames, c) && len(frames) > len(best[n]) {
				best[n] = frames
			}
		}
	}
	found := map[int]bool{}
	for n, frames := range best {
		found[n] = true
		checkPyStack(t, fmt.Sprintf("sample of call %d", n), frames, calls[n])
	}
	// Calls 1 and 2 differ in all_calls' line only: two samples.
	if best[1] != nil && best[2] != nil && pyMatches(best[1], calls[2]) {
		t.Error("calls 1 and 2 counted as one stack")
	}
	for n := 1; n <= 6; n++ {
		if !found[n] {
			t.Errorf("no sample with the Python frames of call %d", n)
		}
	}
	if t.Failed() {
		var b strings.Builder
		profile.WriteFolded(&b, got)
		t.Logf("folded:\n%s\nwarnings: %s", b.String(), warn.String())
	}
}

// pyMatches reports whether frames hold exactly c's Python frames.
func pyMatches(frames []stackFrame, c pyCall) bool {
	i := 0
	for _, f := range frames {
		if f.Runtime != "python" {
			continue
		}
		if i >= len(c.Frames) {
			return false
		}
		name, file, line := c.frame(i)
		if f.Function != name || f.File != file || f.Line != line {
			return false
		}
		i++
	}
	return i == len(c.Frames)
}

// A trace of the host (no process, no command) at a fixture library's
// function, and a Python started after it: once the process's first
// hits join it to the tables, its stacks carry its Python frames.
func TestKernelStackPythonHostWide(t *testing.T) {
	r := newPyStackRun(t, "/usr/bin/python3.11", 3)
	// A copy of its own: no other process maps it.
	r.lib = filepath.Join(t.TempDir(), "libpyfix_host.so")
	testkit.CopyFile(t, testkit.Fixture("libpyfix.so"), r.lib)
	r.args[2] = r.lib
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, warn testkit.Buffer
	cfg := &tracer.Config{Probes: []probe.Spec{r.probe()}, Stack: true, JSON: true, Output: &out, Warnings: &warn}
	done := make(chan error, 1)
	go func() { done <- tracer.Run(ctx, cfg) }()
	time.Sleep(time.Second) // attached: a path's uprobe needs no process
	cmd := exec.Command(r.args[0], r.args[1:]...)
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v: %v", r.args, err)
	}
	time.Sleep(time.Second) // the last records read
	cancel()
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("Run: %v (%s)", err, warn.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not end when cancelled")
	}
	calls := r.calls(t)
	last := map[int]stackHit{}
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var h stackHit
		if err := json.Unmarshal([]byte(l), &h); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		if h.PID == cmd.Process.Pid && len(h.Args) > 0 {
			last[int(h.Args[0])] = h
		}
	}
	for n := 1; n <= 6; n++ {
		h, ok := last[n]
		if !ok {
			t.Errorf("no hit of call %d", n)
			continue
		}
		what := fmt.Sprintf("call %d (%s)", n, calls[n].Thread)
		if h.Truncated != "" {
			t.Errorf("%s: truncated: %s\n%s", what, h.Truncated, showFrames(h.Stack))
		}
		checkPyStack(t, what, h.Stack, calls[n])
	}
	if t.Failed() {
		t.Logf("warnings: %s", warn.String())
	}
}

// pyEntryScript calls outer -> middle -> inner three times under a
// profile function (CPython 3.11 fires function__entry only where the
// eval loop is entered from C, which a profile function makes every
// call), then waits for its hits to be read while it runs.
const pyEntryScript = `import sys, time
def inner():
    pass
def middle():
    inner()
def outer():
    middle()
sys.setprofile(lambda *a: None)
for _ in range(3):
    outer()
sys.setprofile(None)
time.sleep(1.5)
`

// At CPython's own USDT probe python:function__entry (the entered
// function's frame pushed), the USDT program's interpreter walk gives
// inner, middle, outer and <module> at inner's entry, inner at its
// first line. Where they stand among the native frames is not checked:
// Debian's python3.11 fires the probe from the eval loop's cold part
// (_PyEval_EvalFrameDefault.cold, a local symbol of its debug file),
// which EvalRanges does not hold (docs/stacks.md).
func TestKernelStackPythonUSDT(t *testing.T) {
	testkit.RequireKernel(t)
	testkit.SkipOnOldKernel(t, "6.18", "Python frames in --stack (the trace program with the Python walk: Debian's 6.1 verifier refuses it)")
	if runtime.GOARCH != "amd64" {
		testkit.Unavailable(t, "the CFI walk is x86-64's")
	}
	const py = "/usr/bin/python3.11"
	if _, err := os.Stat(py); err != nil {
		testkit.Unavailable(t, "no %s", py)
	}
	script := filepath.Join(t.TempDir(), "entry.py")
	if err := os.WriteFile(script, []byte(pyEntryScript), 0o644); err != nil {
		t.Fatal(err)
	}
	spec, err := probe.Parse(py + ":python:function__entry")
	if err != nil {
		t.Fatal(err)
	}
	var out, warn testkit.Buffer
	cfg := &tracer.Config{Probes: []probe.Spec{spec}, Stack: true, JSON: true, Strs: []probe.ArgNum{probe.Arg(2)},
		Command: []string{py, script}, Output: &out, Warnings: &warn}
	if err := tracer.Run(context.Background(), cfg); err != nil {
		t.Fatalf("Run: %v (%s)", err, warn.String())
	}
	want := []string{"inner", "middle", "outer", "<module>"}
	n := 0
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var h struct {
			Args  []any        `json:"args"`
			Stack []stackFrame `json:"stack"`
		}
		if err := json.Unmarshal([]byte(l), &h); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		if len(h.Args) < 2 || h.Args[1] != "inner" {
			continue
		}
		n++
		var got []string
		var first stackFrame
		for _, f := range h.Stack {
			if f.Runtime == "python" {
				if got == nil {
					first = f
				}
				got = append(got, f.Function)
			}
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("Python frames at inner's entry %q, want %q:\n%s", got, want, showFrames(h.Stack))
		}
		if first.File != script || first.Line != 2 {
			t.Errorf("inner at %s:%d, want %s:2 (its first line: not started yet)", first.File, first.Line, script)
		}
	}
	if n != 3 {
		t.Errorf("%d entries of inner, want 3:\n%s\n%s", n, out.String(), warn.String())
	}
}
