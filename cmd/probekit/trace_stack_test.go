package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/probekit/probekit/internal/test/testkit"
)

// stackHit is a hit line of trace --json --stack.
type stackHit struct {
	Kind     string `json:"kind"`
	Name     string `json:"name"`
	Function string `json:"function"`
	PID      int    `json:"pid"`
	Stack    []struct {
		Address  uint64 `json:"address"`
		Function string `json:"function"`
		Offset   uint64 `json:"offset"`
		Object   string `json:"object"`
		// Runtime is "python" for an interpreted frame (no address).
		Runtime string `json:"runtime"`
	} `json:"stack"`
}

func (h *stackHit) functions() []string {
	var out []string
	for _, f := range h.Stack {
		out = append(out, f.Function)
	}
	return out
}

func decodeStackHits(t *testing.T, out string) []stackHit {
	t.Helper()
	var hits []stackHit
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var h stackHit
		if err := json.Unmarshal([]byte(line), &h); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		hits = append(hits, h)
	}
	return hits
}

// --stack on the C chain main -> run -> fire -> chain_a -> chain_b ->
// chain_c -> chain_end (frame pointers, PIE): at chain_end's entry the
// caller chain_c is there; at the USDT site in chain_c the stack starts
// there. Frames past the first are return addresses: offset 0 would
// mean a frame named after the function that follows its call.
func TestTraceStackC(t *testing.T) {
	testkit.RequireKernel(t)
	requireAMD64(t)
	fx := testkit.Fixture("stack_chain")
	p := testkit.Start(t, fx)
	r := traceWhile(t, p, "fire chain 1", "--json", "--stack", "-n", "6", "-p", itoa(p.PID()), "uprobe:"+fx+":chain_end", fx+":stack:leaf")
	chain := []string{"chain_c", "chain_b", "chain_a", "fire", "run", "main"}
	seen := map[string]bool{}
	for _, h := range decodeStackHits(t, r.out) {
		want := chain
		if h.Kind == "uprobe" {
			want = append([]string{"chain_end"}, chain...)
		}
		fns := h.functions()
		if len(fns) < len(want) || !slices.Equal(fns[:len(want)], want) {
			t.Fatalf("%s hit: stack %v, want %v first", h.Kind, fns, want)
		}
		for i, f := range h.Stack[:len(want)] {
			if !strings.HasSuffix(f.Object, "/stack_chain") || f.Address == 0 || i > 0 && f.Offset == 0 {
				t.Errorf("%s hit: frame %d %+v", h.Kind, i, f)
			}
		}
		if h.Kind == "uprobe" && h.Stack[0].Offset != 0 {
			t.Errorf("entry probe at %s+%d", h.Stack[0].Function, h.Stack[0].Offset)
		}
		seen[h.Kind] = true
	}
	if !seen["uprobe"] || !seen["usdt"] {
		t.Errorf("hits of %v", seen)
	}
}

// --stack on Go, with a symbol table and without: main.add's entry,
// called by main.run from main.main, shows the whole chain down to the
// runtime's goroutine start. Go's functions have no .eh_frame (the Go
// linker writes .debug_frame only, and a stripped file has none), and Go
// keeps frame pointers, so the walk goes by them through Go code, and
// --stack=fp gives the same frames.
func TestTraceStackGo(t *testing.T) {
	testkit.RequireKernel(t)
	requireAMD64(t)
	for _, c := range []struct{ name, flag string }{
		{"goprog", "--stack"}, {"goprog_stripped", "--stack"}, {"goprog", "--stack=fp"},
	} {
		t.Run(c.name+c.flag[len("--stack"):], func(t *testing.T) {
			fx := testkit.Fixture(c.name)
			p := testkit.Start(t, fx)
			r := traceWhile(t, p, "add 1", "--json", c.flag, "-n", "3", "-p", itoa(p.PID()), "uprobe:"+fx+":main.add")
			want := []string{"main.add", "main.run", "main.main", "runtime.main", "runtime.goexit"}
			for _, h := range decodeStackHits(t, r.out) {
				fns := h.functions()
				if n := len(fns); n > 0 {
					// .symtab names the assembly function runtime.goexit.abi0.
					fns[n-1] = strings.TrimSuffix(fns[n-1], ".abi0")
				}
				if !slices.Equal(fns, want) {
					t.Errorf("stack %v, want %v", fns, want)
				}
			}
		})
	}
}

// The text form: each frame indented under its hit.
func TestTraceStackText(t *testing.T) {
	testkit.RequireKernel(t)
	requireAMD64(t)
	fx := testkit.Fixture("stack_chain")
	p := testkit.Start(t, fx)
	r := traceWhile(t, p, "fire chain 1", "--stack", "-n", "1", "-p", itoa(p.PID()), fx+":stack:leaf")
	lines := strings.Split(strings.TrimSpace(r.out), "\n")
	if len(lines) < 7 || !strings.Contains(lines[0], " stack:leaf @") ||
		!strings.HasPrefix(lines[1], "    0x") || !strings.Contains(lines[1], " chain_c+0x") ||
		!strings.Contains(lines[2], " chain_b+0x") || !strings.HasSuffix(lines[6], "/stack_chain)") {
		t.Errorf("output:\n%s", r.out)
	}
}

// nodeScript calls process.memoryUsage(), a C++ callback of node, from
// the JavaScript function probekitHot, called by outer, every 20 ms.
const nodeScript = `function probekitHot() { return process.memoryUsage().rss; }
function outer() { let s = 0; for (let i = 0; i < 10; i++) s += probekitHot(); return s; }
setInterval(outer, 20);
`

// nodeMemoryUsage is the callback's symbol in node 20 (static, in
// .symtab).
const nodeMemoryUsage = "_ZN4nodeL11MemoryUsageERKN2v820FunctionCallbackInfoINS0_5ValueEEE"

// Node.js with --perf-basic-prof: a stack from the entry of a C++
// callback reaches the JavaScript functions that called it, named from
// /tmp/perf-PID.map (--interpreted-frames-native-stack gives interpreted
// functions frames of their own).
func TestTraceStackNode(t *testing.T) {
	testkit.RequireKernel(t)
	requireAMD64(t)
	node, cmd, perfMap := startNode(t)
	r := runTraceCmd("--json", "--stack", "-n", "3", "-p", itoa(cmd.Process.Pid), "uprobe:"+node+":"+nodeMemoryUsage)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.errOut)
	}
	for _, h := range decodeStackHits(t, r.out) {
		fns := h.functions()
		hot := slices.IndexFunc(fns, func(f string) bool { return strings.Contains(f, "probekitHot") })
		if len(fns) < 2 || fns[0] != nodeMemoryUsage || hot < 0 || h.Stack[hot].Object != perfMap ||
			hot+1 >= len(fns) || !strings.Contains(fns[hot+1], "outer") {
			t.Errorf("stack %q", fns)
		}
	}
}

// startNode starts node on nodeScript with its perf map, and waits for
// the map to name probekitHot and outer; it returns node's path, the
// command and the map's path.
func startNode(t *testing.T) (string, *exec.Cmd, string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		testkit.Unavailable(t, "nodejs: %v", err)
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "hot.js")
	if err := os.WriteFile(script, []byte(nodeScript), 0o644); err != nil {
		t.Fatal(err)
	}
	// --no-turbo-inlining: once TurboFan optimises outer it may inline
	// probekitHot into it, and no frame of probekitHot is left to name.
	cmd := exec.Command(node, "--perf-basic-prof", "--interpreted-frames-native-stack", "--no-turbo-inlining", script)
	cmd.Dir = dir // node writes its v8 logs into its working directory
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		os.Remove(fmt.Sprintf("/tmp/perf-%d.map", cmd.Process.Pid))
	})
	// Node writes a function to its perf map when it first runs it; the
	// trace starts once both are there (a map read before would name
	// them only on a later refresh, after the few hits asked for).
	perfMap := fmt.Sprintf("/tmp/perf-%d.map", cmd.Process.Pid)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		data, _ := os.ReadFile(perfMap)
		if strings.Contains(string(data), "probekitHot") && strings.Contains(string(data), "outer") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s names no probekitHot and outer after 20s", perfMap)
		}
	}
	return node, cmd, perfMap
}

// Counted by CFI stack in the kernel, the same callback's stacks are
// whole: the C++ callback, V8's builtins and the JIT code of the
// JavaScript functions (walked by frame pointers, named from the perf
// map), then V8's and node's C++ and libc's start down to _start.
func TestTraceCountStackCFINode(t *testing.T) {
	testkit.RequireKernel(t)
	requireAMD64(t)
	node, cmd, perfMap := startNode(t)
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	var errOut bytes.Buffer
	go func() {
		done <- run([]string{"trace", "--json", "--count", "--stack=cfi", "-i", "1", "-p", itoa(cmd.Process.Pid), "uprobe:" + node + ":" + nodeMemoryUsage}, pw, &errOut)
		pw.Close()
	}()
	// whole is a stack from the callback through outer's JIT frame
	// to _start.
	whole := func(c *stackCount) bool {
		fns := c.functions()
		hot := slices.IndexFunc(fns, func(f string) bool { return strings.Contains(f, "probekitHot") })
		return len(fns) > 0 && fns[0] == nodeMemoryUsage && hot > 0 && c.Key.Stack[hot].Object == perfMap &&
			hot+1 < len(fns) && strings.Contains(fns[hot+1], "outer") &&
			slices.Contains(fns, "_ZN4node5StartEiPPc") && fns[len(fns)-1] == "_start"
	}
	found := make(chan struct{})
	var last atomic.Value
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		once := false
		for sc.Scan() {
			var c stackCount
			if json.Unmarshal(sc.Bytes(), &c) != nil {
				continue
			}
			last.Store(c.functions())
			if !once && whole(&c) {
				once = true
				close(found)
			}
		}
	}()
	select {
	case <-found:
	case <-time.After(60 * time.Second):
		t.Errorf("no whole stack within 60s; last: %q", last.Load())
	}
	cmd.Process.Kill()
	if code := <-done; code != 0 {
		t.Errorf("exit %d: %s", code, errOut.String())
	}
}

// A launched command that ends at once still has its stacks named: its
// files' tables are read while it runs, and its hits are named from them
// after it exited.
func TestTraceStackLaunchedExits(t *testing.T) {
	testkit.RequireKernel(t)
	requireAMD64(t)
	fx := testkit.Fixture("stack_chain")
	r := runTraceCmd("--json", "--stack", fx+":stack:leaf", "--", fx, "--loop", "chain", "3")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.errOut)
	}
	hits := decodeStackHits(t, r.out)
	if len(hits) != 3 {
		t.Fatalf("%d hits, want 3:\n%s", len(hits), r.out)
	}
	want := []string{"chain_c", "chain_b", "chain_a", "fire", "run", "main"}
	for _, h := range hits {
		if fns := h.functions(); len(fns) < len(want) || !slices.Equal(fns[:len(want)], want) {
			t.Errorf("stack %v, want %v first", fns, want)
		}
	}
}
