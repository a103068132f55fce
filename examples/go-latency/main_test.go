package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/uprobe"
)

func TestMain(m *testing.M) { os.Exit(testkit.RunWithLeakCheck(m)) }

// The Go fixture (testdata/goprog), with its symbol table and stripped
// (functions only in .gopclntab).
var fixtures = []string{"goprog", "goprog_stripped"}

// check asserts the invariants of a measurement in which every call
// entered and returned while the probes were attached: each call is in
// the histogram once, each entry is a call or a restart, none stays open.
func check(t *testing.T, res *Result, calls uint64) {
	t.Helper()
	var inHist uint64
	for _, n := range res.Hist {
		inHist += n
	}
	if res.Calls != calls || res.Matched != calls || inHist != calls {
		t.Errorf("%d calls, %d matched, %d in the histogram; the fixture made %d", res.Calls, res.Matched, inHist, calls)
	}
	if res.Entries != res.Calls+res.Restarts {
		t.Errorf("%d entries, want %d calls + %d restarts", res.Entries, res.Calls, res.Restarts)
	}
	if res.Open != 0 {
		t.Errorf("%d calls left open", res.Open)
	}
	if res.Hist[0] != 0 || res.Sum == 0 {
		t.Errorf("latencies of 0 ns: %d, sum %d ns", res.Hist[0], res.Sum)
	}
}

// The fixture is launched with its whole input; measure returns when it
// exits, with exactly the calls it made, for functions with one RET
// (add), several (classify), recursion with stack growth (recurse) and
// concurrent goroutines (load).
func TestMeasureLaunch(t *testing.T) {
	testkit.RequireKernel(t)
	for _, c := range []struct {
		fn, input string
		calls     uint64
	}{
		{"main.add", "add 1000", 1000},
		{"main.classify", "classify 1000", 1000},
		// 200 frames of ~1 KiB outgrow the main goroutine's stack, so
		// runtime.morestack restarts some calls; the entry probe, after
		// the stack check, still fires once per call.
		{"main.recurse", "recurse 200 1\nrecurse 10 5", 201 + 5*11},
		{"main.add", "load 4 50 3", 4 * 50},
	} {
		for _, fx := range fixtures {
			t.Run(fx+"/"+c.fn+"/"+strings.Fields(c.input)[0], func(t *testing.T) {
				cmd := exec.Command(testkit.Fixture(fx))
				cmd.Stdin = strings.NewReader(c.input + "\nquit\n")
				var out strings.Builder
				cmd.Stdout = &out
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				res, err := measure(ctx, c.fn, cmd)
				if err != nil {
					t.Fatal(err)
				}
				if ctx.Err() != nil {
					t.Fatal("measure did not return when the fixture exited")
				}
				if want := strings.Count(c.input, "\n") + 1; strings.Count(out.String(), "done\n") != want {
					t.Fatalf("fixture output %q, want %d done", out.String(), want)
				}
				check(t, res, c.calls)
				if res.Restarts != 0 {
					t.Errorf("%d entries repeated a call: the entry probe is not after the stack check", res.Restarts)
				}
			})
		}
	}
}

// The reason for RET-site probes: a uretprobe on a Go binary is refused.
func TestUretprobeRefused(t *testing.T) {
	bin, err := uprobe.Open(testkit.Fixture("goprog"))
	if err != nil {
		t.Fatal(err)
	}
	defer bin.Close()
	if _, err := bin.Uretprobe("main.add", nil, nil); !errors.Is(err, uprobe.ErrGoUretprobe) {
		t.Errorf("Uretprobe on goprog: %v, want ErrGoUretprobe", err)
	}
}

// Native code has no goroutine register: refused before anything loads.
func TestNotGo(t *testing.T) {
	_, err := measure(context.Background(), "main", exec.Command(testkit.Fixture("usdt_sample")))
	if err == nil || !strings.Contains(err.Error(), "not a Go program") {
		t.Errorf("got %v, want \"not a Go program\"", err)
	}
}

func TestPrint(t *testing.T) {
	r := &Result{Function: "main.f", Calls: 7, Matched: 6, Sum: 60}
	r.Hist[3] = 4 // 4 -> 7
	r.Hist[5] = 2 // 16 -> 31
	var b strings.Builder
	r.Print(&b)
	want := `main.f: 7 calls, avg 10ns
               nsecs : count    distribution
              4 -> 7 : 4        |****************************************|
             8 -> 15 : 0        |                                        |
            16 -> 31 : 2        |********************                    |
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
	lo, hi := slotRange(64)
	if lo != "9223372036854775808" || hi != "18446744073709551615" {
		t.Errorf("slot 64: %s -> %s", lo, hi)
	}
}
