package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/record"
)

type keyedCountLine struct {
	Key   map[string]any `json:"key"`
	Count uint64         `json:"count"`
}

// keyedCounts runs probekit trace --json with args and decodes its lines.
func keyedCounts(t *testing.T, args ...string) []keyedCountLine {
	t.Helper()
	return aggregateJSON[keyedCountLine](t, args...)
}

// pyCountScript calls fib(15) and hello() 7 times under a profile
// function (CPython fires function__entry only with one set), counting
// the calls itself, and writes the counts to argv[1] as JSON.
const pyCountScript = `import sys, json
calls = {"fib": 0, "hello": 0}
def fib(n):
    calls["fib"] += 1
    return n if n < 2 else fib(n - 1) + fib(n - 2)
def hello():
    calls["hello"] += 1
sys.setprofile(lambda *a: None)
fib(15)
for _ in range(7):
    hello()
sys.setprofile(None)
with open(sys.argv[1], "w") as f:
    json.dump(calls, f)
`

// --count --by str 2 of python:function__entry (its second argument is
// the function's name): the kernel's count per name equals the calls
// the script counted itself, fib's 1973 (2*F(16)-1) among them.
func TestTraceCountByPythonFunction(t *testing.T) {
	requireRuntime(t, "/usr/bin/python3.11")
	dir := t.TempDir()
	script, result := filepath.Join(dir, "calls.py"), filepath.Join(dir, "calls.json")
	if err := os.WriteFile(script, []byte(pyCountScript), 0o644); err != nil {
		t.Fatal(err)
	}
	got := keyedCounts(t, "--count", "--by", "str", "2", "/usr/bin/python3.11:python:function__entry", "--",
		"/usr/bin/python3.11", script, result)
	data, err := os.ReadFile(result)
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]uint64
	if err := json.Unmarshal(data, &want); err != nil {
		t.Fatal(err)
	}
	if want["fib"] != 1973 || want["hello"] != 7 {
		t.Fatalf("the script counted %v", want)
	}
	byName := map[string]uint64{}
	for i, l := range got {
		name, _ := l.Key["str2"].(string)
		byName[name] = l.Count
		if i > 0 && l.Count > got[i-1].Count {
			t.Errorf("not sorted by count: %+v", got)
		}
	}
	for name, n := range want {
		if byName[name] != n {
			t.Errorf("%s counted %d times in the kernel, the script counted %d (all: %+v)", name, byName[name], n, got)
		}
	}
	if got[0].Key["str2"] != "fib" {
		t.Errorf("first line %+v, want fib's", got[0])
	}
}

// Keys of function probes: func and arg 2 (sum6's is -2, count_char's
// '-'), str 1 (count_char's text) and comm, each hit counted once per
// round; --top 1 keeps the first.
func TestTraceCountByFuncKeys(t *testing.T) {
	testkit.RequireKernel(t)
	requireAMD64(t)
	fx := testkit.Fixture("func_args")
	const n = 300
	got := keyedCounts(t, "--count", "--by", "func,arg 2", "uprobe:"+fx+":sum6", "uprobe:"+fx+":count_char", "--", fx, itoa(n))
	if len(got) != 2 {
		t.Fatalf("counts %+v, want 2 keys", got)
	}
	want := map[string]float64{"sum6": -2, "count_char": '-'}
	for _, l := range got {
		fn, _ := l.Key["func"].(string)
		if v, ok := want[fn]; !ok || l.Key["arg2"] != v || l.Count != n {
			t.Errorf("line %+v, want arg2 %v and count %d", l, v, n)
		}
	}

	got = keyedCounts(t, "--count", "--by", "str1,comm", "uprobe:"+fx+":count_char", "--", fx, itoa(n))
	comm := filepath.Base(fx)
	if len(got) != 1 || got[0].Key["str1"] != "probekit-func-args" || got[0].Key["comm"] != comm || got[0].Count != n {
		t.Errorf("counts %+v, want %d of probekit-func-args by %s", got, n, comm)
	}

	// A glob: every function of the fixture, keyed by name; the three
	// called per round first (ties by name), --top 3.
	r := runTraceCmd("--count", "--by", "func", "--top", "3", "uprobe:"+fx+":*", "--", fx, itoa(n))
	wantText := "COUNT  FUNC\n  " + itoa(n) + "  count_char\n  " + itoa(n) + "  keep\n  " + itoa(n) + "  sum6\n"
	if r.code != 0 || r.out != wantText {
		t.Errorf("exit %d, output %q, want %q; %s", r.code, r.out, wantText, r.errOut)
	}
}

// --hist 1 --by func: one histogram per function, of sum6's first
// argument (the round).
func TestTraceHistByFunc(t *testing.T) {
	testkit.RequireKernel(t)
	requireAMD64(t)
	fx := testkit.Fixture("func_args")
	const n = 100
	r := runTraceCmd("--json", "--hist", "1", "--by", "func", "uprobe:"+fx+":sum6", "--", fx, itoa(n))
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.errOut)
	}
	var h struct {
		Key     map[string]string `json:"key"`
		Buckets []struct {
			Low   int64  `json:"low"`
			High  uint64 `json:"high"`
			Count uint64 `json:"count"`
		} `json:"buckets"`
	}
	lines := strings.Split(strings.TrimSpace(r.out), "\n")
	if len(lines) != 1 {
		t.Fatalf("output %q, want one histogram", r.out)
	}
	if err := json.Unmarshal([]byte(lines[0]), &h); err != nil {
		t.Fatal(err)
	}
	got := histOf(t, histLine{Probe: "sum6", Buckets: h.Buckets})
	var want record.Histogram
	for v := range int64(n) {
		want[record.Bucket(v)]++
	}
	if h.Key["func"] != "sum6" || got != want {
		t.Errorf("histogram %s %v, want %v", h.Key, got, want)
	}
}

// Bad --by keys are refused with the reason.
func TestTraceByUsage(t *testing.T) {
	for _, c := range []struct{ args, want string }{
		{"--count --by arg 0 usdt:x:p:n", "want arg N, N from 1"},
		{"--count --by str1,str2 usdt:x:p:n", "at most one str key"},
		{"--count --by pid,tid,comm,probe,func usdt:x:p:n", "at most 4"},
		{"--count --by ustack usdt:x:p:n", `key "ustack"`},
		{"--by pid usdt:x:p:n", "--by and --top key the counts"},
		{"--count --top 3 usdt:x:p:n", "--top prints the top keys of --by"},
		{"--count --by ret usdt:x:p:n", "a uretprobe has one value"},
	} {
		_, err := parseTrace(strings.Fields(c.args))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.args, err, c.want)
		}
	}
}

// --count and --hist take "*" and globs as trace does: with -f, every
// object of the tree, sites made as they are attached.
func TestTraceCountSelector(t *testing.T) {
	testkit.RequireKernel(t)
	fx := testkit.Fixture("usdt_sample")
	const n = 400
	got := aggregateJSON[countLine](t, "-f", "--count", "*:sample:loop", "--", fx, "--loop", "loop", itoa(n))
	if len(got) != 1 || got[0] != (countLine{"sample:loop", n}) {
		t.Errorf("counts %+v, want %d of sample:loop", got, n)
	}
	hists := aggregateJSON[histLine](t, "-f", "--hist", "1", "usdt_sam*:sample:loop", "--", fx, "--loop", "loop", itoa(n))
	var want record.Histogram
	for r := range int64(n) {
		want[record.Bucket(r)]++
	}
	if len(hists) != 1 || histOf(t, hists[0]) != want {
		t.Errorf("histogram %+v, want %v", hists, want)
	}
	keyed := aggregateJSON[keyedCountLine](t, "-f", "--count", "--by", "probe,comm", "*:sample:loop", "--", fx, "--loop", "loop", itoa(n))
	if len(keyed) != 1 || keyed[0].Key["probe"] != "sample:loop" || keyed[0].Key["comm"] != "usdt_sample" || keyed[0].Count != n {
		t.Errorf("keyed counts %+v, want %d of sample:loop by usdt_sample", keyed, n)
	}
}
