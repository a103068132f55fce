package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

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
	if _, err := os.Stat(python); err != nil {
		testkit.Unavailable(t, "%s: %v", python, err)
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
func traceScript(t *testing.T, script string) ([]Call, string) {
	t.Helper()
	path := writeScript(t, script)
	var out bytes.Buffer
	cmd := exec.Command(python, path)
	cmd.Stdout = &out
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var calls []Call
	err := trace(ctx, cmd, func(c Call) {
		if c.File == path {
			calls = append(calls, c)
		}
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
	calls, out := traceScript(t, nestedScript)
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

// A failing command's exit status is returned.
func TestTraceCommandFails(t *testing.T) {
	requirePython(t)
	cmd := exec.Command(python, "-c", "raise SystemExit(3)")
	err := trace(context.Background(), cmd, func(Call) {})
	if err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("got %v, want exit status 3", err)
	}
}

// A loop of many calls either prints every call or says how many it did
// not: the calls printed plus those counted lost are at least the calls
// made (the count also holds other code's calls), never fewer.
func TestTraceLostCounted(t *testing.T) {
	requirePython(t)
	for _, ring := range []uint32{ringBytes, 4096} {
		t.Run(fmt.Sprintf("ring %d", ring), func(t *testing.T) {
			defer func(old uint32) { ringBytes = old }(ringBytes)
			ringBytes = ring
			lost := traceLoop(t)
			if ring == 4096 && lost == 0 {
				t.Error("a one-page ring lost nothing: the loss path went untested")
			}
		})
	}
}

// traceLoop traces a loop of calls and returns how many events were
// counted lost.
func traceLoop(t *testing.T) uint64 {
	// 10,000 calls: in CI's 6.1 VM (software emulation) they take 15 s
	// traced; 100,000 went past the two minutes below.
	const n = 10_000
	path := writeScript(t, fmt.Sprintf(`import sys
sys.setprofile(lambda *a: None)
def leaf():
    pass
for _ in range(%d):
    leaf()
`, n))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var seen uint64
	err := trace(ctx, exec.Command(python, path), func(c Call) {
		if c.File == path && c.Function == "leaf" {
			seen++
		}
	})
	var lost uint64
	var le *LostError
	if errors.As(err, &le) {
		lost, err = le.Calls, le.Err
	}
	if err != nil {
		t.Fatalf("trace: %v", err)
	}
	t.Logf("%d of %d entries and returns of leaf printed, %d events counted lost", seen, 2*n, lost)
	if seen > 2*n || seen+lost < 2*n {
		t.Errorf("%d entries and returns printed and %d counted lost, of %d made: calls went missing unreported", seen, lost, 2*n)
	}
	return lost
}
