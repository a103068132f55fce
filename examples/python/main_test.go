package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/probekit/probekit/internal/test/testkit"
)

func TestMain(m *testing.M) { os.Exit(testkit.RunWithLeakCheck(m)) }

// nestedScript has outer() call inner() three times. Line numbers matter:
// function__entry reports a function's def line, function__return the
// line that returns.
const nestedScript = `import sys
sys.setprofile(lambda *a: None)
def inner(x):
    return x * 2
def outer():
    total = 0
    for i in range(3):
        total += inner(i)
    return total
outer()
print("done")
`

// nestedCalls is what nestedScript's own functions must produce, one
// string per call as short() writes it.
var nestedCalls = []string{
	"-> outer:5 depth 0",
	"-> inner:3 depth 1", "<- inner:4 depth 1",
	"-> inner:3 depth 1", "<- inner:4 depth 1",
	"-> inner:3 depth 1", "<- inner:4 depth 1",
	"<- outer:9 depth 0",
}

func short(c Call) string {
	arrow := "->"
	if c.Return {
		arrow = "<-"
	}
	return fmt.Sprintf("%s %s:%d depth %d", arrow, c.Function, c.Line, c.Depth)
}

// requirePython skips (or fails under PROBEKIT_REQUIRE_KERNEL=1) without
// root or without Debian's python3.11.
func requirePython(t *testing.T) {
	t.Helper()
	testkit.RequireKernel(t)
	if _, err := os.Stat(defaultPython); err != nil {
		testkit.Unavailable(t, "%s: %v", defaultPython, err)
	}
}

// writeScript writes script to a file of its own: its path tells its
// calls apart from those of other code (the standard library compiles
// some code from strings, which "-c" code would be confused with).
func writeScript(t *testing.T, script string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "script.py")
	if err := os.WriteFile(path, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// traceScript runs python on script through trace and returns the calls
// of the script's own code, and the script's output.
func traceScript(t *testing.T, script string, opts options) ([]Call, string) {
	t.Helper()
	path := writeScript(t, script)
	var out bytes.Buffer
	opts.Python = defaultPython
	opts.Cmd = exec.Command(defaultPython, path)
	opts.Cmd.Stdout = &out
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var calls []Call
	err := trace(ctx, opts, func(c Call, _ bool) bool {
		if c.File == path {
			calls = append(calls, c)
		}
		return true
	})
	if err != nil {
		t.Fatalf("trace: %v", err)
	}
	if ctx.Err() != nil {
		t.Fatal("trace did not return when the command exited")
	}
	return calls, out.String()
}

// Every call of the script is seen, once, in order, with its nesting, and
// each return carries its own call's latency.
func TestTraceNested(t *testing.T) {
	requirePython(t)
	calls, out := traceScript(t, nestedScript, options{})
	if out != "done\n" {
		t.Errorf("script printed %q, want \"done\\n\"", out)
	}
	got := make([]string, len(calls))
	for i, c := range calls {
		got[i] = short(c)
	}
	if !slices.Equal(got, nestedCalls) {
		t.Fatalf("calls of the script:\n\t%s\nwant\n\t%s", strings.Join(got, "\n\t"), strings.Join(nestedCalls, "\n\t"))
	}

	pid := calls[0].PID
	var inner time.Duration
	for _, c := range calls {
		if c.PID != pid || c.TID != pid {
			t.Errorf("%s: pid/tid %d/%d, want %d/%d", short(c), c.PID, c.TID, pid, pid)
		}
		if c.Return != c.EntrySeen {
			t.Errorf("%s: EntrySeen %v", short(c), c.EntrySeen)
		}
		if !c.Return {
			continue
		}
		if c.Latency <= 0 {
			t.Errorf("%s: latency %v", short(c), c.Latency)
		}
		if c.Function == "inner" {
			inner += c.Latency
		}
	}
	// outer's latency is keyed by its own depth: it spans the three inner
	// calls, which a mix-up of the (tid, depth) keys would not give.
	if outer := calls[len(calls)-1].Latency; outer < inner {
		t.Errorf("outer took %v, less than the %v of the inner calls it made", outer, inner)
	}
}

// With Unmatched, returns without an entry are reported too: the profile
// function's (it runs with tracing suspended, so its entries never fire)
// and the module's (entered before setprofile). They sit inside the
// innermost open call and leave the matched calls as they were.
func TestTraceUnmatched(t *testing.T) {
	requirePython(t)
	calls, _ := traceScript(t, nestedScript, options{Unmatched: true})
	var matched []string
	open := 0
	lambdas := 0
	for i, c := range calls {
		switch {
		case c.EntrySeen || !c.Return:
			matched = append(matched, short(c))
			if c.Return {
				open--
			} else {
				open++
			}
		case c.Function == "<lambda>":
			lambdas++
			if c.Line != 2 || c.Depth != open || c.Latency != 0 {
				t.Errorf("call %d: %s latency %v, want <lambda>:2 at depth %d (the open calls) without latency", i, short(c), c.Latency, open)
			}
		case c.Function == "<module>":
			if c.Line != 11 || c.Depth != 0 || i != len(calls)-1 {
				t.Errorf("call %d of %d: %s, want <module>:11 at depth 0, last", i, len(calls), short(c))
			}
		default:
			t.Errorf("call %d: unexpected unmatched return %s", i, short(c))
		}
	}
	if !slices.Equal(matched, nestedCalls) {
		t.Errorf("matched calls:\n\t%s\nwant\n\t%s", strings.Join(matched, "\n\t"), strings.Join(nestedCalls, "\n\t"))
	}
	// The profile function runs at least once per call and return of the
	// four functions.
	if lambdas < 8 {
		t.Errorf("%d returns of the profile function, want at least 8", lambdas)
	}
	if len(calls) == 0 || calls[len(calls)-1].Function != "<module>" {
		t.Error("the module's return is missing")
	}
}

// When handle stops the trace (-n), the command is detached and runs to
// its end, and trace waits for it.
func TestTraceStop(t *testing.T) {
	requirePython(t)
	var out bytes.Buffer
	cmd := exec.Command(defaultPython, writeScript(t, nestedScript))
	cmd.Stdout = &out
	n := 0
	err := trace(context.Background(), options{Python: defaultPython, Cmd: cmd}, func(c Call, _ bool) bool {
		n++
		return n < 3
	})
	if err != nil {
		t.Fatal(err)
	}
	if n != 3 {
		t.Errorf("handle called %d times after asking to stop at 3", n)
	}
	if out.String() != "done\n" || cmd.ProcessState == nil || !cmd.ProcessState.Success() {
		t.Errorf("command did not run to its end: output %q, state %v", out.String(), cmd.ProcessState)
	}
}

// A failing command's exit status is returned.
func TestTraceCommandFails(t *testing.T) {
	requirePython(t)
	cmd := exec.Command(defaultPython, "-c", "raise SystemExit(3)")
	err := trace(context.Background(), options{Python: defaultPython, Cmd: cmd}, func(Call, bool) bool { return true })
	if err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("got %v, want exit status 3", err)
	}
}

// When ctx is done, a launched command is sent SIGTERM and waited for.
func TestTraceCancel(t *testing.T) {
	requirePython(t)
	path := writeScript(t, "import sys, time\nsys.setprofile(lambda *a: None)\ndef f():\n    pass\nf()\ntime.sleep(60)\n")
	cmd := exec.Command(defaultPython, path)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	err := trace(ctx, options{Python: defaultPython, Cmd: cmd}, func(c Call, _ bool) bool {
		if c.File == path && c.Function == "f" && c.Return {
			cancel() // python is about to sleep for a minute
		}
		return true
	})
	if err == nil || !strings.Contains(err.Error(), "signal: terminated") {
		t.Errorf("got %v, want the command ended by SIGTERM", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("trace returned after %v: the command was not stopped", d)
	}
	if cmd.ProcessState == nil {
		t.Error("the command was not waited for")
	}
}

// pidScript announces itself once profiling is on, then calls tick()
// every 10 ms until its stdin is closed, and exits: the test, not a count
// of calls, decides how long it runs.
const pidScript = `import select, sys
sys.setprofile(lambda *a: None)
def tick(i):
    return i + 1
print("ready", flush=True)
i = 0
while not select.select([sys.stdin], [], [], 0.01)[0]:
    tick(i)
    i += 1
`

// pidTicks is how many entries of tick TestTracePID waits for.
const pidTicks = 20

// -p: a running process is traced from the attach on, and trace returns
// by itself when the process exits.
func TestTracePID(t *testing.T) {
	requirePython(t)
	path := writeScript(t, pidScript)
	cmd := exec.Command(defaultPython, path)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	defer stdin.Close()
	if line, err := bufio.NewReader(stdout).ReadString('\n'); line != "ready\n" {
		t.Fatalf("python said %q, %v", line, err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var entries, returns int
	var last Call
	err = trace(ctx, options{Python: defaultPython, PID: cmd.Process.Pid}, func(c Call, _ bool) bool {
		if entries == pidTicks {
			stdin.Close() // enough seen: python leaves its loop and exits
		}
		if c.File != path {
			return true
		}
		if c.PID != uint32(cmd.Process.Pid) || c.Function != "tick" || c.Depth != 0 {
			t.Errorf("unexpected call %s (pid %d)", short(c), c.PID)
		}
		switch {
		case !c.Return:
			entries++
			if c.Line != 3 {
				t.Errorf("tick entered at line %d, want 3", c.Line)
			}
		case c.Line != 4 || !c.EntrySeen || last.Return || c.Latency <= 0:
			t.Errorf("bad return %s after %s: latency %v", short(c), short(last), c.Latency)
		default:
			returns++
		}
		last = c
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	if ctx.Err() != nil {
		t.Fatal("trace did not notice that the process exited")
	}
	// Tracing starts at some call after "ready": the first return may
	// come without its entry, and is then not reported.
	if entries < pidTicks || returns < entries-1 || returns > entries {
		t.Errorf("%d entries and %d returns of tick, want at least %d and as many", entries, returns, pidTicks)
	}
}

// -p with a process that does not run the interpreter fails clearly
// instead of tracing nothing.
func TestTracePIDNotPython(t *testing.T) {
	requirePython(t)
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	err := trace(context.Background(), options{Python: defaultPython, PID: cmd.Process.Pid}, func(Call, bool) bool { return true })
	if err == nil || !strings.Contains(err.Error(), "does not run "+defaultPython) {
		t.Fatalf("got %v, want \"does not run\"", err)
	}
}

func TestFormat(t *testing.T) {
	for _, c := range []struct {
		call Call
		want string
	}{
		{Call{PID: 42, TID: 42, File: "app.py", Function: "main", Line: 7},
			"42      -> app.py:main:7"},
		{Call{PID: 42, TID: 42, Depth: 2, File: "app.py", Function: "f", Line: 9, Return: true, EntrySeen: true, Latency: 12345 * time.Nanosecond},
			"42          <- app.py:f:9  12.3µs"},
		{Call{PID: 42, TID: 43, Depth: 1, File: "<string>", Function: "<lambda>", Line: 2, Return: true},
			"42/43     <- <string>:<lambda>:2  (entry not seen)"},
		{Call{PID: 1, TID: 1, Depth: maxIndent + 5, File: "r.py", Function: "r", Line: 1},
			"1       [45]" + strings.Repeat("  ", maxIndent) + "-> r.py:r:1"},
	} {
		if got := format(c.call); got != c.want {
			t.Errorf("format(%+v)\n got %q\nwant %q", c.call, got, c.want)
		}
	}
}

func TestFormatLatency(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"},
		{999, "999ns"},
		{1234, "1.23µs"},
		{12345, "12.3µs"},
		{123456, "123µs"},
		{1234567, "1.23ms"},
		{45678901, "45.7ms"},
		{1234567890, "1.23s"},
	} {
		if got := formatLatency(c.d); got != c.want {
			t.Errorf("formatLatency(%d) = %q, want %q", c.d, got, c.want)
		}
	}
}

// cString stops at the first NUL, and keeps a full buffer whole.
func TestCString(t *testing.T) {
	if got := cString([]byte("abc\x00def\x00")); got != "abc" {
		t.Errorf("got %q", got)
	}
	if got := cString([]byte("abcd")); got != "abcd" {
		t.Errorf("got %q", got)
	}
}

// The cost per event on the Go side: decoding and formatting one line.
func BenchmarkEventFormat(b *testing.B) {
	var ev pycallsEvent
	ev.Pid, ev.Tid, ev.Depth, ev.Lineno, ev.Kind, ev.EntrySeen, ev.LatencyNs = 4242, 4242, 3, 12, 1, 1, 12345
	copy(ev.Filename[:], "/usr/lib/python3.11/json/decoder.py")
	copy(ev.Funcname[:], "raw_decode")
	sample := unsafe.Slice((*byte)(unsafe.Pointer(&ev)), unsafe.Sizeof(ev))
	b.ReportAllocs()
	for b.Loop() {
		e, err := eventOf(sample)
		if err != nil {
			b.Fatal(err)
		}
		_ = format(callOf(e))
	}
}
