package main

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

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
// where the frame-pointer walk ends.
var stackPaths = []struct {
	count uint64
	chain []string
}{
	{1000, []string{"leaf", "emit", "hot", "main", "__libc_start_call_main"}},
	{300, []string{"leaf", "emit", "cold", "main", "__libc_start_call_main"}},
}

// --count --stack counts by stack in the kernel: a launched stack_paths
// (which exits right after its last hit) gives exactly its two call
// paths with their calls, most frequent first, every frame named,
// libc's included: libc is mapped after the exec stop, and its table is
// read at the command's exit stop (symbolize.Stacks.WatchLaunched).
func TestTraceCountStack(t *testing.T) {
	testkit.RequireKernel(t)
	requireAMD64(t)
	needFuncCookie(t)
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
			if j == len(c.Key.Stack)-1 {
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
	if r.code != 0 || len(lines) != 6 || lines[0] != "1000" || !strings.Contains(lines[1], " leaf+0x0 (") || !strings.Contains(lines[3], " hot+0x") {
		t.Errorf("--top 1: exit %d, %q (%s)", r.code, r.out, r.errOut)
	}
}

// --folded prints one line per call path, outermost first, then its
// count; checked line by line.
func TestTraceCountStackFolded(t *testing.T) {
	testkit.RequireKernel(t)
	requireAMD64(t)
	needFuncCookie(t)
	fx := testkit.Fixture("stack_paths")
	r := runTraceCmd("--count", "--stack", "--folded", "uprobe:"+fx+":leaf", "--", fx, "1000", "300")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.errOut)
	}
	want := []string{
		"__libc_start_call_main;main;cold;emit;leaf 300",
		"__libc_start_call_main;main;hot;emit;leaf 1000",
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
	needFuncCookie(t)
	fx := testkit.Fixture("stack_paths")
	file := filepath.Join(t.TempDir(), "leaf.pprof")
	r := runTraceCmd("--count", "--stack", "--pprof", file, "uprobe:"+fx+":leaf", "--", fx, "1000", "300")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.errOut)
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
		{[]string{"--count", "--stack=cfi", "f:p:n"}, nil},
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
		for _, k := range req.keys {
			keys = append(keys, k.name)
		}
		if !slices.Equal(keys, c.keys) {
			t.Errorf("%q: keys %q, want %q", c.args, keys, c.keys)
		}
	}
	for _, c := range []struct {
		arg        string
		stack, cfi bool
	}{{"--stack", true, false}, {"--stack=fp", true, false}, {"--stack=cfi", true, true}, {"--stack=false", false, false}} {
		req, err := parseTrace([]string{c.arg, "f:p:n"})
		if err != nil || req.stack != c.stack || req.cfi != c.cfi {
			t.Errorf("%s: %v, %+v", c.arg, err, req)
		}
	}
}
