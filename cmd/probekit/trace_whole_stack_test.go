package main

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/probekit/probekit/internal/test/testkit"
)

// wholeHit is a hit line of trace --json --stack with its functions and
// its "truncated" member.
type wholeHit struct {
	PID   int `json:"pid"`
	Stack []struct {
		Function string `json:"function"`
	} `json:"stack"`
	Truncated string `json:"truncated"`
}

func decodeWholeHits(t *testing.T, out string) []wholeHit {
	t.Helper()
	var hits []wholeHit
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if !strings.Contains(line, `"stack":`) {
			continue // a join or leave line
		}
		var h wholeHit
		if err := json.Unmarshal([]byte(line), &h); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		hits = append(hits, h)
	}
	return hits
}

func (h *wholeHit) functions() []string {
	var out []string
	for _, f := range h.Stack {
		out = append(out, f.Function)
	}
	return out
}

// chainNoFPWhole is the stack of stack_chain_nofp (-O2
// -fomit-frame-pointer) at chain_end's entry, walked whole.
var chainNoFPWhole = []string{"chain_end", "chain_c", "chain_b", "chain_a", "fire", "run", "main",
	"__libc_start_call_main", "__libc_start_main_impl", "_start"}

// Plain --stack walks code built without frame pointers to _start
// (issue 34: it stopped after two frames, unmarked), under -- CMD and
// -p PID; --stack=fp is still the frame-pointer walk, which stops short
// of main there.
func TestTraceStackWholeByDefault(t *testing.T) {
	testkit.RequireKernel(t)
	requireAMD64(t)
	fx := testkit.Fixture("stack_chain_nofp")
	probe := "uprobe:" + fx + ":chain_end"
	check := func(how string, out string, n int) {
		t.Helper()
		hits := decodeWholeHits(t, out)
		if len(hits) != n {
			t.Fatalf("%s: %d hits, want %d:\n%s", how, len(hits), n, out)
		}
		for _, h := range hits {
			if fns := h.functions(); !slices.Equal(fns, chainNoFPWhole) || h.Truncated != "" {
				t.Errorf("%s: stack %q (truncated %q), want %q", how, fns, h.Truncated, chainNoFPWhole)
			}
		}
	}
	r := runTraceCmd("--json", "--stack", probe, "--", fx, "--loop", "chain", "3")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.errOut)
	}
	check("-- CMD", r.out, 3)

	p := testkit.Start(t, fx)
	r = traceWhile(t, p, "fire chain 3", "--json", "--stack", "-n", "3", "-p", itoa(p.PID()), probe)
	if r.code != 0 {
		t.Fatalf("-p: exit %d: %s", r.code, r.errOut)
	}
	check("-p", r.out, 3)

	r = runTraceCmd("--json", "--stack=fp", probe, "--", fx, "--loop", "chain", "1")
	hits := decodeWholeHits(t, r.out)
	if r.code != 0 || len(hits) != 1 {
		t.Fatalf("--stack=fp: exit %d, %d hits: %s%s", r.code, len(hits), r.out, r.errOut)
	}
	if fns := hits[0].functions(); slices.Contains(fns, "main") || !slices.Equal(fns[:2], chainNoFPWhole[:2]) {
		t.Errorf("--stack=fp: %q, want %q then no main (the frame-pointer walk)", fns, chainNoFPWhole[:2])
	}
}

// A host-wide trace (no -p, no command) walks whole the stacks of a
// process started after it began: the process is added to the walk's
// tables at its first hit, and the hits before its tables are loaded
// are walked by frame pointers, marked so and counted in a note; every
// hit from the first whole one on is whole (issue 34). Both host-wide
// forms: a named file (attached path-wide) and a glob (a watch of the
// host, formerly refused with CFI stacks). How many hits come before the
// tables are loaded depends on the machine's load (with the race
// detector on this 2-CPU host, up to 2 s of hits; without it, see
// docs/stacks.md): the test asks for 5 whole of 40 hits 250 ms apart.
func TestTraceStackHostWideLater(t *testing.T) {
	testkit.RequireKernel(t)
	requireAMD64(t)
	for _, c := range []struct {
		name string
		// probe is the probe, on bin, the fixture's copy.
		probe func(bin string) string
		top   string // the stack's first function
	}{
		{"named", func(bin string) string { return "uprobe:" + bin + ":chain_end" }, "chain_end"},
		{"glob", func(bin string) string { return filepath.Dir(bin) + "/pkstk_*:stack:leaf" }, "chain_c"},
	} {
		t.Run(c.name, func(t *testing.T) {
			// A copy of its own: no other process maps it.
			bin := filepath.Join(t.TempDir(), "pkstk_chain")
			testkit.CopyFile(t, testkit.Fixture("stack_chain_nofp"), bin)
			const n = 40
			var out, errOut testkit.Buffer
			done := make(chan int, 1)
			go func() {
				done <- run([]string{"trace", "--json", "--stack", "-n", strconv.Itoa(n), c.probe(bin)}, &out, &errOut)
			}()
			// The process starts once the trace has loaded (its "missing"
			// note for the glob; for the named file, its hits before the
			// attach are lost, and it fires until n are traced).
			time.Sleep(500 * time.Millisecond)
			fx := testkit.Start(t, bin)
			code := -1
			for deadline := time.Now().Add(60 * time.Second); code < 0; {
				select {
				case code = <-done:
					continue
				default:
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d hits not traced within 60s: %s%s", n, out.String(), errOut.String())
				}
				fx.Fire("chain", 1)
				// Apart enough for the tables to load (libc's takes
				// 31-59 ms without the race detector) after a few.
				time.Sleep(250 * time.Millisecond)
			}
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut.String())
			}
			want := chainNoFPWhole[slices.Index(chainNoFPWhole, c.top):]
			hits := decodeWholeHits(t, out.String())
			whole := 0
			for i, h := range hits {
				fns := h.functions()
				switch {
				case h.PID != fx.PID():
					t.Errorf("hit %d of pid %d, want %d", i, h.PID, fx.PID())
				case slices.Equal(fns, want) && h.Truncated == "":
					whole++
				case whole > 0:
					t.Errorf("hit %d: stack %q (truncated %q) after a whole one", i, fns, h.Truncated)
				case !strings.Contains(h.Truncated, "pid "+strconv.Itoa(fx.PID())+" not loaded yet"):
					t.Errorf("hit %d: stack %q cut (truncated %q), not marked as walked before its tables were loaded", i, fns, h.Truncated)
				}
			}
			t.Logf("%d of %d hits whole", whole, len(hits))
			if len(hits) != n || whole < 5 {
				t.Errorf("%d of %d hits whole (want %d hits, 5 whole at least):\n%s", whole, len(hits), n, out.String())
			}
			if whole < len(hits) && !strings.Contains(errOut.String(), "before their processes' tables were loaded") {
				t.Errorf("%d hits walked early, not counted in the notes: %s", len(hits)-whole, errOut.String())
			}
		})
	}
}

// A stack cut short says why in each output: goprog's recurse 200
// nests more frames than the walk's 127, and the hits deeper than that
// end with the depth limit's marker, in text, in JSON and as the
// outermost frame of the folded (and pprof) counted stacks; the hits
// nearer the top are whole (Go's stacks end at a zero frame record),
// unmarked.
func TestTraceStackTruncatedMarked(t *testing.T) {
	testkit.RequireKernel(t)
	requireAMD64(t)
	fx := testkit.Fixture("goprog")
	probe := "uprobe:" + fx + ":main.recurse"
	const marker = "[truncated: depth limit of 127 frames]"
	withStdin(t, "recurse 200 1\nquit\n")
	r := runTraceCmd("--json", "--stack", probe, "--", fx)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.errOut)
	}
	hits := decodeWholeHits(t, r.out)
	if len(hits) != 201 {
		t.Fatalf("%d hits, want 201", len(hits))
	}
	cut := 0
	for i, h := range hits {
		switch {
		case len(h.Stack) == 127 && h.Truncated == "depth limit of 127 frames":
			cut++
		case len(h.Stack) < 127 && h.Truncated == "" && slices.Contains(h.functions(), "main.main"):
		default:
			t.Errorf("hit %d: %d frames, truncated %q, functions %q", i, len(h.Stack), h.Truncated, h.functions())
		}
	}
	if cut == 0 || cut == len(hits) {
		t.Errorf("%d of %d hits cut, want some and not all", cut, len(hits))
	}

	withStdin(t, "recurse 200 1\nquit\n")
	r = runTraceCmd("--stack", "-n", "201", probe, "--", fx)
	if n := strings.Count(r.out, "    "+marker+"\n"); r.code != 0 || n != cut {
		t.Errorf("text: exit %d, %d marker lines, want %d: %s", r.code, n, cut, r.errOut)
	}

	withStdin(t, "recurse 200 1\nquit\n")
	r = runTraceCmd("--count", "--stack", "--folded", probe, "--", fx)
	if r.code != 0 {
		t.Fatalf("--folded: exit %d: %s", r.code, r.errOut)
	}
	// The cut stacks of the deepest hits share their 127 frames: they
	// are counted together.
	marked := 0
	for _, line := range strings.Split(strings.TrimSpace(r.out), "\n") {
		if strings.HasPrefix(line, marker+";") {
			n, err := strconv.Atoi(line[strings.LastIndexByte(line, ' ')+1:])
			if err != nil {
				t.Fatalf("folded line %q: %v", line, err)
			}
			marked += n
		} else if strings.Contains(line, "[truncated") || !strings.Contains(line, "main.main;") {
			t.Errorf("folded line %q: neither marked nor whole", line)
		}
	}
	if marked != cut {
		t.Errorf("--folded: %d hits in marked stacks, want %d:\n%s", marked, cut, r.out)
	}
}
