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
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/probekit/probekit/internal/test/testkit"
)

// stackCount is a line of trace --count --stack --json.
type stackCount struct {
	Key struct {
		PID   int `json:"pid"`
		Stack []struct {
			Address  uint64 `json:"address"`
			Function string `json:"function"`
			Object   string `json:"object"`
		} `json:"stack"`
	} `json:"key"`
	Count uint64 `json:"count"`
}

func (c *stackCount) functions() []string {
	var out []string
	for _, f := range c.Key.Stack {
		out = append(out, f.Function)
	}
	return out
}

// The calls of stack_paths 1000 300: leaf from emit from hot 1000
// times, from cold 300 times; then main, then libc's
// __libc_start_call_main (a local symbol of libc6-dbg's debug file),
// where the frame-pointer walk ends, and past it, walked by libc's CFI,
// __libc_start_main_impl and the fixture's _start.
var stackPaths = []struct {
	count uint64
	chain []string
}{
	{1000, []string{"leaf", "emit", "hot", "main", "__libc_start_call_main", "__libc_start_main_impl", "_start"}},
	{300, []string{"leaf", "emit", "cold", "main", "__libc_start_call_main", "__libc_start_main_impl", "_start"}},
}

// --count --stack counts by stack in the kernel: a launched stack_paths
// (which exits right after its last hit) gives exactly its two call
// paths with their calls, most frequent first, every frame named,
// libc's included: libc is mapped after the exec stop, and its table is
// read at the command's exit stop (symbolize.Stacks.WatchLaunched).
func TestTraceCountStack(t *testing.T) {
	testkit.RequireKernel(t)
	requireAMD64(t)
	fx := testkit.Fixture("stack_paths")
	r := runTraceCmd("--json", "--count", "--stack", "uprobe:"+fx+":leaf", "--", fx, "1000", "300")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.errOut)
	}
	var got []stackCount
	for _, line := range strings.Split(strings.TrimSpace(r.out), "\n") {
		var c stackCount
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		got = append(got, c)
	}
	if len(got) != len(stackPaths) {
		t.Fatalf("%d stacks, want %d:\n%s", len(got), len(stackPaths), r.out)
	}
	for i, want := range stackPaths {
		c := got[i]
		if c.Count != want.count || !slices.Equal(c.functions(), want.chain) {
			t.Errorf("stack %d: %d hits of %v, want %d of %v", i, c.Count, c.functions(), want.count, want.chain)
		}
		for j, f := range c.Key.Stack {
			obj := "stack_paths"
			if strings.HasPrefix(f.Function, "__libc_start_") {
				obj = "libc.so.6"
			}
			if filepath.Base(f.Object) != obj || f.Address == 0 {
				t.Errorf("stack %d frame %d: %+v, want in %s", i, j, f, obj)
			}
		}
	}
	// The text form: the count, then the frames.
	r = runTraceCmd("--count", "--stack", "--top", "1", "uprobe:"+fx+":leaf", "--", fx, "1000", "300")
	lines := strings.Split(strings.TrimSpace(r.out), "\n")
	if r.code != 0 || len(lines) != 8 || lines[0] != "1000" || !strings.Contains(lines[1], " leaf+0x0 (") || !strings.Contains(lines[3], " hot+0x") {
		t.Errorf("--top 1: exit %d, %q (%s)", r.code, r.out, r.errOut)
	}
}

// --folded prints one line per call path, outermost first, then its
// count; checked line by line.
func TestTraceCountStackFolded(t *testing.T) {
	testkit.RequireKernel(t)
	requireAMD64(t)
	fx := testkit.Fixture("stack_paths")
	r := runTraceCmd("--count", "--stack", "--folded", "uprobe:"+fx+":leaf", "--", fx, "1000", "300")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.errOut)
	}
	want := []string{
		"_start;__libc_start_main_impl;__libc_start_call_main;main;cold;emit;leaf 300",
		"_start;__libc_start_main_impl;__libc_start_call_main;main;hot;emit;leaf 1000",
	}
	got := strings.Split(strings.TrimSpace(r.out), "\n")
	if !slices.Equal(got, want) {
		t.Errorf("folded:\n%s\nwant:\n%s", r.out, strings.Join(want, "\n"))
	}
}

// --pprof writes a profile that go tool pprof reads: -top gives leaf
// all 1,300 hits flat, hot 1,000 and cold 300 cumulated; -traces the
// two stacks with their counts.
func TestTraceCountStackPprof(t *testing.T) {
	testkit.RequireKernel(t)
	requireAMD64(t)
	fx := testkit.Fixture("stack_paths")
	file := filepath.Join(t.TempDir(), "leaf.pprof")
	r := runTraceCmd("--count", "--stack", "--pprof", file, "uprobe:"+fx+":leaf", "--", fx, "1000", "300")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.errOut)
	}
	if testing.Short() {
		// The VM matrix (-short): go tool pprof is built from GOROOT's
		// sources there, 160 s of a 168 s test under 5.10's emulation;
		// the profile's own parser checks the same counts, and the host
		// runs go tool pprof.
		checkPprofStacks(t, file)
		return
	}
	gotool := filepath.Join(runtime.GOROOT(), "bin", "go")
	pprof := func(flag string) string {
		out, err := exec.Command(gotool, "tool", "pprof", flag, file).CombinedOutput()
		if err != nil {
			t.Fatalf("go tool pprof %s: %v\n%s", flag, err, out)
		}
		return string(out)
	}
	top := pprof("-top")
	for _, row := range []struct {
		flat, cum int
		fn        string
	}{{1300, 1300, "leaf"}, {0, 1300, "emit"}, {0, 1000, "hot"}, {0, 300, "cold"}, {0, 1300, "main"}, {0, 1300, "__libc_start_call_main"}} {
		re := regexp.MustCompile(fmt.Sprintf(`(?m)^\s+%d\s+\S+%%\s+\S+%%\s+%d\s+\S+%%\s+%s$`, row.flat, row.cum, regexp.QuoteMeta(row.fn)))
		if !re.MatchString(top) {
			t.Errorf("-top: no row %d flat, %d cum for %s:\n%s", row.flat, row.cum, row.fn, top)
		}
	}
	if !strings.Contains(top, "Type: hits") || !regexp.MustCompile(`Build ID: [0-9a-f]{40}`).MatchString(top) {
		t.Errorf("-top: want sample type hits and the fixture's build ID:\n%s", top)
	}
	traces := pprof("-traces")
	for _, p := range stackPaths {
		block := fmt.Sprintf("%10d   %s\n", p.count, p.chain[0])
		for _, fn := range p.chain[1:] {
			block += "             " + fn + "\n"
		}
		if !strings.Contains(traces, block) {
			t.Errorf("-traces: no block\n%s\nin\n%s", block, traces)
		}
	}
}

// --count --stack and --by stack key the counts by stack; --pprof and
// --folded need them; --stack=cfi and --hist do not count by stack.
func TestTraceStackFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		keys []string // "" : refused
	}{
		{[]string{"--count", "--stack", "f:p:n"}, []string{"stack"}},
		{[]string{"--count", "--by", "pid", "--stack", "f:p:n"}, []string{"pid", "stack"}},
		{[]string{"--count", "--by", "stack,comm", "--folded", "f:p:n"}, []string{"stack", "comm"}},
		{[]string{"--count", "--by", "stack", "--stack", "--pprof", "x", "f:p:n"}, []string{"stack"}},
		{[]string{"--count", "--pprof", "x", "f:p:n"}, nil},
		{[]string{"--folded", "f:p:n"}, nil},
		{[]string{"--stack", "--folded", "f:p:n"}, nil},
		{[]string{"--count", "--stack=cfi", "f:p:n"}, []string{"stack"}},
		{[]string{"--hist", "1", "--stack", "f:p:n"}, nil},
		{[]string{"--stack=dwarf", "f:p:n"}, nil},
		{[]string{"--count", "--by", "stack 1", "f:p:n"}, nil},
	} {
		req, err := parseTrace(c.args)
		if c.keys == nil {
			if err == nil {
				t.Errorf("%q: accepted", c.args)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", c.args, err)
			continue
		}
		var keys []string
		for _, k := range req.Keys {
			keys = append(keys, k.Name)
		}
		if !slices.Equal(keys, c.keys) {
			t.Errorf("%q: keys %q, want %q", c.args, keys, c.keys)
		}
	}
	for _, c := range []struct {
		arg       string
		stack, fp bool
	}{{"--stack", true, false}, {"--stack=fp", true, true}, {"--stack=cfi", true, false}, {"--stack=false", false, false}} {
		req, err := parseTrace([]string{c.arg, "f:p:n"})
		if err != nil || req.Stack != c.stack || req.FramePointers != c.fp {
			t.Errorf("%s: %v, %+v", c.arg, err, req)
		}
	}
}

// stackFunctions runs trace --json --stack... and returns the functions
// of each hit's stack whose first function is fn (or of every hit when
// fn is "").
func stackFunctions(t *testing.T, fn string, args ...string) [][]string {
	t.Helper()
	r := runTraceCmd(append([]string{"--json"}, args...)...)
	if r.code != 0 {
		t.Fatalf("probekit trace %v: exit %d: %s", args, r.code, r.errOut)
	}
	var out [][]string
	for _, h := range decodeStackHits(t, r.out) {
		fns := h.functions()
		if fn == "" || len(fns) > 0 && fns[0] == fn {
			out = append(out, fns)
		}
	}
	return out
}

// A launched command that exits right after its hits has every frame
// of its per-hit stacks named, libc's (mapped after the exec stop)
// included, by frame pointers and by CFI alike.
func TestTraceStackLaunchedExit(t *testing.T) {
	testkit.RequireKernel(t)
	requireAMD64(t)
	fx := testkit.Fixture("stack_paths")
	for _, flag := range []string{"--stack", "--stack=fp"} {
		want := stackPaths[0].chain
		if flag == "--stack=fp" {
			want = want[:5] // the frame-pointer walk ends in libc
		}
		hits := stackFunctions(t, "", flag, "uprobe:"+fx+":leaf", "--", fx, "1", "0")
		if len(hits) != 1 || len(hits[0]) < len(want) || !slices.Equal(hits[0][:len(want)], want) {
			t.Errorf("%s: stacks %q, want one starting %q", flag, hits, want)
		}
	}
}

// Mixed code: main (frame pointers) calls libstack_mid.so's mid_call
// (none: it keeps data in rbp), which calls leaf back. The CFI walk
// gives every frame to _start; the frame-pointer walk stops after
// mid_call, on the data it reads as a frame record.
func TestTraceStackCFIMixed(t *testing.T) {
	testkit.RequireKernel(t)
	requireAMD64(t)
	fx := testkit.Fixture("stack_paths")
	want := []string{"leaf", "mid_call", "main", "__libc_start_call_main", "__libc_start_main_impl", "_start"}
	hits := stackFunctions(t, "", "--stack=cfi", "uprobe:"+fx+":leaf", "--", fx, "mixed", "3")
	if len(hits) != 3 {
		t.Fatalf("%d hits, want 3", len(hits))
	}
	for _, fns := range hits {
		if !slices.Equal(fns, want) {
			t.Errorf("--stack=cfi: %q, want %q", fns, want)
		}
	}
	for _, fns := range stackFunctions(t, "", "--stack=fp", "uprobe:"+fx+":leaf", "--", fx, "mixed", "1") {
		if slices.Contains(fns, "main") || !slices.Equal(fns[:2], want[:2]) {
			t.Errorf("--stack (frame pointers): %q, want %q then no main", fns, want[:2])
		}
	}
}

// python3.11 (no frame pointers) at function__entry, launched: the CFI
// walk goes through the interpreter down to Py_BytesMain and libc's
// start, where the frame-pointer walk stops at once. python3.11's main
// is one instruction, jmp Py_BytesMain (objdump -d at the address _start
// passes to __libc_start_main): a tail call, so no stack holds it, and
// Py_BytesMain returns to __libc_start_call_main. The USDT probe is
// attached by the attacher with its semaphore (no bare uprobe on the
// system's python).
func TestTraceStackPythonCFI(t *testing.T) {
	testkit.RequireKernel(t)
	const python = "/usr/bin/python3.11"
	if _, err := os.Stat(python); err != nil {
		testkit.Unavailable(t, "%s: %v", python, err)
	}
	script := "import sys\nsys.setprofile(lambda *a: None)\ndef probekit_fn(n):\n    return n + 1\nprobekit_fn(1)\n"
	probe := python + ":python:function__entry"
	// The entry of probekit_fn: its hit is the one whose second string
	// argument is the name; the stacks are matched by their frames.
	want := []string{"PyEval_EvalCode", "PyRun_StringFlags", "PyRun_SimpleStringFlags", "Py_RunMain", "Py_BytesMain",
		"__libc_start_call_main", "__libc_start_main_impl", "_start"}
	r := runTraceCmd("--json", "--str", "2", "--stack=cfi", probe, "--", python, "-c", script)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.errOut)
	}
	found := false
	for _, line := range strings.Split(strings.TrimSpace(r.out), "\n") {
		if !strings.Contains(line, `"probekit_fn"`) {
			continue
		}
		found = true
		var h stackHit
		if err := json.Unmarshal([]byte(line), &h); err != nil {
			t.Fatal(err)
		}
		var named []string
		for _, f := range h.Stack {
			if f.Runtime != "" {
				continue // Python's frames (docs/stacks.md): native ones are checked here
			}
			if f.Function != "" {
				named = append(named, f.Function)
			}
			if filepath.Base(f.Object) != "python3.11" && filepath.Base(f.Object) != "libc.so.6" {
				t.Errorf("frame %+v in neither python3.11 nor libc", f)
			}
		}
		if len(named) < len(want) || !slices.Equal(named[len(named)-len(want):], want) {
			t.Errorf("--stack=cfi: named frames %q, want %q last", named, want)
		}
	}
	if !found {
		t.Fatalf("no hit of probekit_fn in\n%s", r.out)
	}
	r = runTraceCmd("--json", "--str", "2", "--stack=fp", probe, "--", python, "-c", script)
	for _, line := range strings.Split(strings.TrimSpace(r.out), "\n") {
		if strings.Contains(line, `"probekit_fn"`) && strings.Contains(line, "Py_BytesMain") {
			t.Errorf("the frame-pointer walk reached Py_BytesMain: python3.11 keeps frame pointers?\n%s", line)
		}
	}
}

// -f: the stacks of every process of the tree are counted, and named
// after each exited (follow.Options.Hold reads them at their exit
// stop): two runs of stack_paths under sh add up per path.
func TestTraceCountStackFollow(t *testing.T) {
	testkit.RequireKernel(t)
	requireAMD64(t)
	fx := testkit.Fixture("stack_paths")
	r := runTraceCmd("-f", "--count", "--stack", "--folded", "uprobe:"+fx+":leaf", "--", "/bin/sh", "-c", fx+" 10 3 >/dev/null; "+fx+" 5 1 >/dev/null")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.errOut)
	}
	want := []string{
		"_start;__libc_start_main_impl;__libc_start_call_main;main;cold;emit;leaf 4",
		"_start;__libc_start_main_impl;__libc_start_call_main;main;hot;emit;leaf 15",
	}
	if got := strings.Split(strings.TrimSpace(r.out), "\n"); !slices.Equal(got, want) {
		t.Errorf("folded:\n%s\nwant:\n%s", r.out, strings.Join(want, "\n"))
	}
}

// -p: a running stack_chain (frame pointers) counted by stack with -i
// 1: once the counts show the probe attached, 100 more rounds add
// exactly 100 to the chain's one stack.
func TestTraceCountStackPID(t *testing.T) {
	testkit.RequireKernel(t)
	requireAMD64(t)
	fx := testkit.Fixture("stack_chain")
	p := testkit.Start(t, fx)
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	var errOut bytes.Buffer
	go func() {
		done <- run([]string{"trace", "--count", "--stack", "--folded", "-i", "1", "-p", itoa(p.PID()), "uprobe:" + fx + ":chain_end"}, pw, &errOut)
		pw.Close()
	}()
	const path = "main;run;fire;chain_a;chain_b;chain_c;chain_end "
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	// count is the count of the chain's line, once per printing.
	count := func(fire bool) uint64 {
		deadline := time.After(30 * time.Second)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("trace ended: %s", errOut.String())
				}
				if i := strings.Index(l, path); i >= 0 && (i == 0 || l[i-1] == ';') {
					var n uint64
					fmt.Sscan(l[i+len(path):], &n)
					return n
				}
			case <-deadline:
				t.Fatal("no count of the chain within 30s")
			case <-time.After(5 * time.Millisecond):
				if fire {
					p.Loop("chain", 1)
				}
			}
		}
	}
	count(true) // attached and counting
	before := count(false)
	if before == 0 {
		t.Fatalf("count 0")
	}
	if err := p.Loop("chain", 100); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		n := count(false)
		if n == before+100 {
			break
		}
		if n > before+100 || time.Now().After(deadline) {
			t.Fatalf("count %d, want %d", n, before+100)
		}
	}
	p.Stop()
	if code := <-done; code != 0 {
		t.Errorf("exit %d: %s", code, errOut.String())
	}
	for range lines {
	}
}

// chainCPU fires stack_chain's chain n times and returns the fixture's
// CPU time per hit (schedstat).
func chainCPU(b *testing.B, p *testkit.Process, n int) float64 {
	b.Helper()
	before := schedRuntime(b, p.PID())
	if err := p.Loop("chain", n); err != nil {
		b.Fatal(err)
	}
	return float64(schedRuntime(b, p.PID())-before) / float64(n)
}

// tracedChainCPU runs probekit trace with args on a new fixture
// process, fires chain once every 5 ms until a line of output shows the
// probe attached, then returns chain's CPU time per hit over b.N hits.
func tracedChainCPU(b *testing.B, fixture string, args ...string) float64 {
	p := testkit.Start(b, fixture)
	pr, pw := io.Pipe()
	var lines atomic.Int64
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			lines.Add(1)
		}
		io.Copy(io.Discard, pr)
	}()
	done := make(chan traceResult, 1)
	go func() {
		var errOut bytes.Buffer
		code := run(append([]string{"trace", "-p", itoa(p.PID())}, args...), pw, &errOut)
		pw.Close()
		done <- traceResult{code: code, errOut: errOut.String()}
	}()
	for deadline := time.Now().Add(30 * time.Second); lines.Load() == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatal("no output within 30s")
		}
		p.Loop("chain", 1)
	}
	ns := chainCPU(b, p, b.N)
	p.Stop()
	if r := <-done; r.code != 0 {
		b.Fatalf("exit %d: %s", r.code, r.errOut)
	}
	<-read
	return ns
}

// bpftraceChainCPU is tracedChainCPU under bpftrace -e 'uprobe:FIXTURE:
// chain_end { @[ustack] = count(); }' (it prints the map every second,
// which shows it attached).
func bpftraceChainCPU(b *testing.B, fixture string) float64 {
	bt, err := exec.LookPath("bpftrace")
	if err != nil {
		testkit.Unavailable(b, "bpftrace: %v", err)
	}
	p := testkit.Start(b, fixture)
	cmd := exec.Command(bt, "-p", itoa(p.PID()), "-e", "uprobe:"+fixture+":chain_end { @[ustack] = count(); } interval:s:1 { print(@); }")
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	var counted atomic.Bool
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "]: ") {
				counted.Store(true)
			}
		}
	}()
	for deadline := time.Now().Add(30 * time.Second); !counted.Load(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatal("bpftrace counted nothing within 30s")
		}
		p.Loop("chain", 1)
	}
	return chainCPU(b, p, b.N)
}

// BenchmarkTraceStackCount is the cost of a hit at chain_end in
// stack_chain (frame pointers) to the traced program, in one run: no
// probe, probekit trace --count (per probe), probekit trace --count
// --stack=fp (per stack, in the kernel, by frame pointers) and bpftrace's
// @[ustack] = count() on the same target; cpu-ns/hit of each, and the
// ratio of --count --stack to bpftrace (goal: at most 1).
func BenchmarkTraceStackCount(b *testing.B) {
	testkit.RequireKernel(b)
	requireAMD64(b)
	fx := testkit.Fixture("stack_chain")
	probe := "uprobe:" + fx + ":chain_end"
	p := testkit.Start(b, fx)
	b.ResetTimer()
	none := chainCPU(b, p, b.N)
	count := tracedChainCPU(b, fx, "--json", "--count", "-i", "1", probe)
	stack := tracedChainCPU(b, fx, "--count", "--stack=fp", "--folded", "-i", "1", probe)
	bt := bpftraceChainCPU(b, fx)
	b.StopTimer()
	b.ReportMetric(none, "none-ns/hit")
	b.ReportMetric(count, "count-ns/hit")
	b.ReportMetric(stack, "count_stack-ns/hit")
	b.ReportMetric(bt, "bpftrace_ustack-ns/hit")
	b.ReportMetric(stack/bt, "stack/bpftrace")
	b.ReportMetric((stack-none)/(bt-none), "stack/bpftrace-over-none")
}

// BenchmarkTraceStackCountCFI is the cost of a hit at chain_end counted
// by stack, to the traced program, in one run: on stack_chain (frame
// pointers) by the kernel's frame-pointer walk (--count --stack=fp), by
// the CFI walk in BPF (--count --stack) and by bpftrace's
// @[ustack] = count(); on stack_chain_nofp (none) by the CFI walk and by
// bpftrace (whose walk stops at the first caller there). cpu-ns/hit of
// each, each less the program's time without a probe (over-none), and
// the ratios: CFI to bpftrace on each build (goal: at most 1), and the
// CFI walk of the no-frame-pointer build to the frame-pointer walk of
// the other (goal: at most 2). Run:
//
//	go test -run '^$' -bench BenchmarkTraceStackCountCFI -benchtime 100000x ./cmd/probekit/
func BenchmarkTraceStackCountCFI(b *testing.B) {
	testkit.RequireKernel(b)
	requireAMD64(b)
	fp, nofp := testkit.Fixture("stack_chain"), testkit.Fixture("stack_chain_nofp")
	probe := func(fx string) string { return "uprobe:" + fx + ":chain_end" }
	p := testkit.Start(b, fp)
	b.ResetTimer()
	none := chainCPU(b, p, b.N)
	fpStack := tracedChainCPU(b, fp, "--count", "--stack=fp", "--folded", "-i", "1", probe(fp))
	fpCFI := tracedChainCPU(b, fp, "--count", "--stack", "--folded", "-i", "1", probe(fp))
	fpBt := bpftraceChainCPU(b, fp)
	nofpCFI := tracedChainCPU(b, nofp, "--count", "--stack", "--folded", "-i", "1", probe(nofp))
	nofpBt := bpftraceChainCPU(b, nofp)
	b.StopTimer()
	for _, m := range []struct {
		ns   float64
		name string
	}{{none, "none"}, {fpStack, "fp_stack"}, {fpCFI, "fp_cfi"}, {fpBt, "fp_bpftrace"}, {nofpCFI, "nofp_cfi"}, {nofpBt, "nofp_bpftrace"}} {
		b.ReportMetric(m.ns, m.name+"-ns/hit")
	}
	b.ReportMetric((fpCFI-none)/(fpBt-none), "fp_cfi/bpftrace-over-none")
	b.ReportMetric((nofpCFI-none)/(nofpBt-none), "nofp_cfi/bpftrace-over-none")
	b.ReportMetric((nofpCFI-none)/(fpStack-none), "nofp_cfi/fp_stack-over-none")
}

// BenchmarkTraceStackHit is the cost of a hit at chain_end in
// stack_chain_nofp printed with its stack, in one run: trace --stack=fp
// (the kernel's frame-pointer walk, which stops early there) and trace
// --stack (the CFI walk in BPF, whole); the
// ratio of the two (goal: at most 2), each less the hit without a stack.
func BenchmarkTraceStackHit(b *testing.B) {
	testkit.RequireKernel(b)
	requireAMD64(b)
	fx := testkit.Fixture("stack_chain_nofp")
	probe := "uprobe:" + fx + ":chain_end"
	b.ResetTimer()
	plain := tracedChainCPU(b, fx, probe)
	fp := tracedChainCPU(b, fx, "--stack=fp", probe)
	cfi := tracedChainCPU(b, fx, "--stack", probe)
	b.StopTimer()
	b.ReportMetric(plain, "nostack-ns/hit")
	b.ReportMetric(fp, "fp-ns/hit")
	b.ReportMetric(cfi, "cfi-ns/hit")
	b.ReportMetric(cfi/fp, "cfi/fp")
	b.ReportMetric((cfi-plain)/(fp-plain), "cfi/fp-over-nostack")
}

// -p PID with a glob target (follow.WatchProcess): the process is read
// at the start, so its stacks are named after it quit.
func TestTraceCountStackGlob(t *testing.T) {
	testkit.RequireKernel(t)
	requireAMD64(t)
	out, _ := countStackGlob(t, "stack_chain", "--stack")
	want := "_start;__libc_start_main_impl;__libc_start_call_main;main;run;fire;chain_a;chain_b;chain_c 5\n"
	if out != want {
		t.Errorf("folded %q, want %q", out, want)
	}
}

// countStackGlob runs trace --count STACKFLAG --folded -p PID on a new
// fixture process with the target stack_ch*:stack:leaf, fires chain 5
// times once the first attach line shows, stops the process, and
// returns the output and the other lines of standard error (attach and
// detach lines left out).
func countStackGlob(t *testing.T, fixture, stackFlag string) (string, string) {
	t.Helper()
	p := testkit.Start(t, testkit.Fixture(fixture))
	var out bytes.Buffer
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	go func() {
		done <- run([]string{"trace", "--count", stackFlag, "--folded", "-p", itoa(p.PID()), "stack_ch*:stack:leaf"}, &out, pw)
		pw.Close()
	}()
	attached := make(chan struct{})
	var errOut strings.Builder
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(pr)
		once := false
		for sc.Scan() {
			switch l := sc.Text(); {
			case strings.HasPrefix(l, "attach "):
				if !once {
					once = true
					close(attached)
				}
			case strings.HasPrefix(l, "detach "):
			default:
				errOut.WriteString(l + "\n")
			}
		}
	}()
	select {
	case <-attached:
	case <-time.After(30 * time.Second):
		t.Fatal("not attached within 30s")
	}
	p.Fire("chain", 5)
	p.Stop()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d", code)
	}
	<-read
	return out.String(), errOut.String()
}

// checkPprofStacks parses the profile at path (github.com/google/pprof's
// parser, which go tool pprof uses) and wants stackPaths' two stacks,
// leaf first, with their counts of hits, and the fixture's build ID.
func checkPprofStacks(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.SampleType) == 0 || p.SampleType[0].Type != "hits" {
		t.Errorf("sample types %v, want hits first", p.SampleType)
	}
	found := false
	for _, m := range p.Mapping {
		found = found || regexp.MustCompile(`^[0-9a-f]{40}$`).MatchString(m.BuildID)
	}
	if !found {
		t.Errorf("no mapping with the fixture's build ID: %v", p.Mapping)
	}
	got := map[string]int64{}
	for _, smp := range p.Sample {
		var fns []string
		for _, loc := range smp.Location {
			for _, l := range loc.Line {
				fns = append(fns, l.Function.Name)
			}
		}
		got[strings.Join(fns, ";")] += smp.Value[0]
	}
	for _, sp := range stackPaths {
		if key := strings.Join(sp.chain, ";"); got[key] != int64(sp.count) {
			t.Errorf("stack %s: %d hits, want %d (stacks %v)", key, got[key], sp.count, got)
		}
	}
}
