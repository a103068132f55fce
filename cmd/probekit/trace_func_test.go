package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/probekit/probekit/internal/features"
	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/uprobe"
)

// funcHit is a JSON line of a function probe; values stay as their JSON
// text.
type funcHit struct {
	Kind     string            `json:"kind"`
	Function string            `json:"function"`
	PID      int               `json:"pid"`
	TID      int               `json:"tid"`
	Address  uint64            `json:"address"`
	Args     []json.RawMessage `json:"args"`
	Ret      json.RawMessage   `json:"ret"`
}

// traceFuncJSON runs probekit trace --json with args and decodes its
// lines, each also as the set of its keys.
func traceFuncJSON(t *testing.T, args ...string) ([]funcHit, [][]string) {
	t.Helper()
	r := runTraceCmd(append([]string{"--json"}, args...)...)
	if r.code != 0 {
		t.Fatalf("probekit trace %v: exit %d: %s", args, r.code, r.errOut)
	}
	var hits []funcHit
	var keys [][]string
	for _, line := range strings.Split(strings.TrimSpace(r.out), "\n") {
		var h funcHit
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(line), &h); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		if followNotice(h.Kind) {
			continue
		}
		var k []string
		for key := range m {
			k = append(k, key)
		}
		slices.Sort(k)
		hits = append(hits, h)
		keys = append(keys, k)
	}
	return hits, keys
}

// withStdin makes content the standard input of the commands probekit
// trace launches (they inherit os.Stdin) until the test ends.
func withStdin(t *testing.T, content string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "stdin")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdin
	os.Stdin = f
	t.Cleanup(func() {
		os.Stdin = old
		f.Close()
	})
}

func requireAMD64(t testing.TB) {
	t.Helper()
	if runtime.GOARCH != "amd64" {
		t.Skip("the fixtures' functions and registers are those of x86-64")
	}
}

func funcAddress(t *testing.T, path, name string) uint64 {
	t.Helper()
	b, err := uprobe.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	fn, err := b.Function(name)
	if err != nil {
		t.Fatal(err)
	}
	return fn.Address
}

// C functions: the six argument registers of the System V ABI at the
// entry, exact, and the return value, signed, at the return (a kernel
// uretprobe). func_args calls sum6(r, -2, 300, -40000, 5e9, -6e9), which
// returns r - 1000039702, and count_char(s, '-'), which returns 2.
func TestTraceFuncC(t *testing.T) {
	testkit.RequireKernel(t)
	requireAMD64(t)
	traceFuncC(t)
}

// TestTraceFuncCNoCookie: the same without BPF cookies (before Linux
// 5.15; forced off on newer kernels): the launched fixture is a PIE, its
// sites are found by the process and runtime address, and the returns
// are probed at sum6's and count_char's return instructions.
func TestTraceFuncCNoCookie(t *testing.T) {
	testkit.RequireKernel(t)
	requireAMD64(t)
	defer features.ForceOff(features.Cookie)()
	traceFuncC(t)
}

// TestTraceFuncNoCookieLibrary: without BPF cookies, a function probe in
// a shared library the launched command has not mapped yet (it is
// stopped at its execve, before the dynamic linker runs) is refused, with
// the feature and its release named (its runtime address is not known)
// and the hint that -f attaches it.
func TestTraceFuncNoCookieLibrary(t *testing.T) {
	testkit.RequireKernel(t)
	defer features.ForceOff(features.Cookie)()
	r := runTraceCmd("uprobe:libc.so.6:malloc", "--", testkit.Fixture("func_args"), "1")
	if r.code == 0 || !strings.Contains(r.errOut, "not mapped by pid") || !strings.Contains(r.errOut, features.Cookie.String()) || !strings.Contains(r.errOut, "with -f") {
		t.Errorf("exit %d, stderr %q; want a refusal naming %s", r.code, r.errOut, features.Cookie)
	}
}

func traceFuncC(t *testing.T) {
	t.Helper()
	fx := testkit.Fixture("func_args")
	hits, keys := traceFuncJSON(t, "uprobe:"+fx+":sum6", "uretprobe:"+fx+":sum6",
		"uprobe:"+fx+":count_char", "uretprobe:"+fx+":count_char", "--", fx, "3")
	if len(hits) != 12 {
		t.Fatalf("%d hits, want 12: %+v", len(hits), hits)
	}
	sum6, count := funcAddress(t, fx, "sum6"), funcAddress(t, fx, "count_char")
	for r := range 3 {
		h := hits[4*r : 4*r+4]
		want := []string{itoa(r), "-2", "300", "-40000", "5000000000", "-6000000000"}
		if h[0].Kind != "uprobe" || h[0].Function != "sum6" || h[0].Address != sum6 || !rawEqual(h[0].Args, want) {
			t.Errorf("round %d: sum6 entry %+v, want args %v", r, h[0], want)
		}
		if h[1].Kind != "uretprobe" || h[1].Function != "sum6" || string(h[1].Ret) != jsonInt(int64(r)-1000039702) || h[1].Args != nil {
			t.Errorf("round %d: sum6 return %+v, want %d", r, h[1], int64(r)-1000039702)
		}
		if h[2].Kind != "uprobe" || h[2].Function != "count_char" || h[2].Address != count || len(h[2].Args) != 6 || string(h[2].Args[1]) != "45" {
			t.Errorf("round %d: count_char entry %+v, want '-' (45) second", r, h[2])
		}
		if h[3].Kind != "uretprobe" || string(h[3].Ret) != "2" {
			t.Errorf("round %d: count_char return %+v, want 2", r, h[3])
		}
		for _, x := range h {
			if x.PID == 0 || x.TID != x.PID {
				t.Errorf("round %d: pid %d tid %d", r, x.PID, x.TID)
			}
		}
	}
	// The shape of each kind's line.
	for i, k := range keys[:2] {
		want := []string{"address", "args", "comm", "function", "kind", "pid", "tid", "time", "time_ns"}
		if i == 1 {
			want = []string{"address", "comm", "function", "kind", "pid", "ret", "tid", "time", "time_ns"}
		}
		if !slices.Equal(k, want) {
			t.Errorf("%s line: keys %v, want %v", hits[i].Kind, k, want)
		}
	}
}

func rawEqual(raw []json.RawMessage, want []string) bool {
	return slices.EqualFunc(raw, want, func(r json.RawMessage, w string) bool { return string(r) == w })
}

// --str N reads a function argument as the string it points to.
func TestTraceFuncStr(t *testing.T) {
	testkit.RequireKernel(t)
	requireAMD64(t)
	fx := testkit.Fixture("func_args")
	hits, _ := traceFuncJSON(t, "--str", "1", "uprobe:"+fx+":count_char", "--", fx, "2")
	if len(hits) != 2 {
		t.Fatalf("%d hits, want 2", len(hits))
	}
	for _, h := range hits {
		if len(h.Args) != 6 || string(h.Args[0]) != `"probekit-func-args"` || string(h.Args[1]) != "45" {
			t.Errorf("hit %+v", h)
		}
	}
	// The same in text.
	r := runTraceCmd("--str", "1", "uprobe:"+fx+":count_char", "--", fx, "1")
	want := ` uprobe:count_char @0x` // then the address, and the arguments
	if r.code != 0 || !strings.Contains(r.out, want) || !strings.Contains(r.out, ` ["probekit-func-args" 45 `) {
		t.Errorf("exit %d, %q: %s", r.code, r.out, r.errOut)
	}
}

// libc's malloc by library name: the sizes the fixture asks for, exact,
// each followed in its thread by the return of a non-null pointer.
func TestTraceMalloc(t *testing.T) {
	testkit.RequireKernel(t)
	fx := testkit.Fixture("func_args")
	hits, _ := traceFuncJSON(t, append(launchedLibrary(t), "uprobe:libc.so.6:malloc", "uretprobe:libc.so.6:malloc", "--", fx, "3")...)
	var sizes []string
	for i, h := range hits {
		if h.Function != "malloc" {
			t.Fatalf("hit of %s", h.Function)
		}
		if h.Kind != "uprobe" {
			continue
		}
		size := string(h.Args[0])
		if size < "4242" || size > "4244" || len(size) != 4 {
			continue // libc's own allocations
		}
		sizes = append(sizes, size)
		if i+1 >= len(hits) || hits[i+1].Kind != "uretprobe" || hits[i+1].TID != h.TID {
			t.Fatalf("malloc(%s) not followed by its return: %+v", size, hits[i:])
		}
		if ret := string(hits[i+1].Ret); ret == "0" || ret == "null" || strings.HasPrefix(ret, "-") {
			t.Errorf("malloc(%s) returned %s", size, ret)
		}
	}
	if !slices.Equal(sizes, []string{"4242", "4243", "4244"}) {
		t.Errorf("malloc sizes %v, want 4242, 4243, 4244 in order", sizes)
	}
}

// Go functions, in a binary with a symbol table and in a stripped one
// (.gopclntab only): arguments in Go's registers (main.add(i, 2i+1): rax,
// rbx), results at each return instruction (rax), never a kernel
// uretprobe: recurse's frames make the runtime copy the stack while
// probes are attached, and the program ends normally (a failed exit fails
// the trace).
func TestTraceGo(t *testing.T) {
	testkit.RequireKernel(t)
	requireAMD64(t)
	traceGo(t)
}

// TestTraceGoNoCookie: the same without BPF cookies: the Go fixtures are
// not position-independent, so their sites are keyed for every process
// by their link-time addresses.
func TestTraceGoNoCookie(t *testing.T) {
	testkit.RequireKernel(t)
	requireAMD64(t)
	defer features.ForceOff(features.Cookie)()
	traceGo(t)
}

func traceGo(t *testing.T) {
	t.Helper()
	for _, name := range []string{"goprog", "goprog_stripped"} {
		t.Run(name, func(t *testing.T) {
			fx := testkit.Fixture(name)
			withStdin(t, "add 4\nclassify 4\nrecurse 100 2\nquit\n")
			hits, _ := traceFuncJSON(t, "uprobe:"+fx+":main.add", "uretprobe:"+fx+":main.add",
				"uretprobe:"+fx+":main.classify", "uretprobe:"+fx+":main.recurse", "--", fx)
			var adds, addRets, classify, recurse []string
			for _, h := range hits {
				switch {
				case h.Kind == "uprobe" && h.Function == "main.add":
					if len(h.Args) != 9 {
						t.Fatalf("main.add entry with %d values, want Go's 9 argument registers", len(h.Args))
					}
					adds = append(adds, string(h.Args[0])+","+string(h.Args[1]))
				case h.Kind == "uretprobe" && h.Function == "main.add":
					addRets = append(addRets, string(h.Ret))
				case h.Kind == "uretprobe" && h.Function == "main.classify":
					classify = append(classify, string(h.Ret))
				case h.Kind == "uretprobe" && h.Function == "main.recurse":
					recurse = append(recurse, string(h.Ret))
				default:
					t.Fatalf("hit %+v", h)
				}
			}
			if want := []string{"0,1", "1,3", "2,5", "3,7"}; !slices.Equal(adds, want) {
				t.Errorf("main.add arguments %v, want %v", adds, want)
			}
			if want := []string{"1", "4", "7", "10"}; !slices.Equal(addRets, want) {
				t.Errorf("main.add results %v, want %v", addRets, want)
			}
			if want := []string{"-1", "0", "1", "2"}; !slices.Equal(classify, want) {
				t.Errorf("main.classify results %v, want %v", classify, want)
			}
			// recurse(100, 0) returns the sum of d%3 for d in 1..100,
			// 100, from each of its 101 frames; called twice.
			if len(recurse) != 202 || slices.ContainsFunc(recurse, func(s string) bool { return s != "100" }) {
				t.Errorf("%d main.recurse results, want 202 of 100: %v", len(recurse), recurse)
			}
		})
	}
}

// USDT and function probes in one trace, one ring: sample_sema_fire's
// entry (round in rdi), the USDT probe inside it (its semaphore raised
// by the trace), and its return (1: the semaphore was seen raised).
func TestTraceMixed(t *testing.T) {
	testkit.RequireKernel(t)
	requireAMD64(t)
	fx := testkit.Fixture("usdt_sample")
	r := runTraceCmd("--json", fx+":sample:sema", "uprobe:"+fx+":sample_sema_fire", "uretprobe:"+fx+":sample_sema_fire",
		"--", fx, "--loop", "sema", "2")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.errOut)
	}
	lines := strings.Split(strings.TrimSpace(r.out), "\n")
	if len(lines) != 6 {
		t.Fatalf("%d lines, want 6:\n%s", len(lines), r.out)
	}
	for i, line := range lines {
		round := i / 3
		var want string
		switch i % 3 {
		case 0:
			want = `{"kind":"uprobe","function":"sample_sema_fire","pid":`
			var h funcHit
			if err := json.Unmarshal([]byte(line), &h); err != nil || string(h.Args[0]) != itoa(round) {
				t.Errorf("line %d %q: want round %d first (%v)", i, line, round, err)
			}
		case 1:
			want = `{"kind":"usdt","provider":"sample","name":"sema","pid":`
			if !strings.HasSuffix(line, `"args":[`+itoa(round)+`,`+itoa(3*round+1)+`]}`) {
				t.Errorf("line %d %q: want round %d and cost %d", i, line, round, 3*round+1)
			}
		case 2:
			want = `{"kind":"uretprobe","function":"sample_sema_fire","pid":`
			if !strings.HasSuffix(line, `,"ret":1}`) {
				t.Errorf("line %d %q: want return value 1", i, line)
			}
		}
		if !strings.HasPrefix(line, want) {
			t.Errorf("line %d %q, want it to start %q", i, line, want)
		}
	}
}

// -p: the target is opened as the process sees it, the probe filtered to
// it; -n ends the trace.
func TestTraceFuncPID(t *testing.T) {
	testkit.RequireKernel(t)
	requireAMD64(t)
	fx := testkit.Fixture("usdt_sample")
	p := testkit.Start(t, fx)
	r := traceWhileFiring(t, p, "sema", "--json", "-p", itoa(p.PID()), "-n", "3", "uprobe:usdt_sample:sample_sema_fire")
	var hits []funcHit
	for _, line := range strings.Split(strings.TrimSpace(r.out), "\n") {
		var h funcHit
		if err := json.Unmarshal([]byte(line), &h); err != nil {
			t.Fatal(err)
		}
		hits = append(hits, h)
	}
	if len(hits) != 3 {
		t.Fatalf("%d hits with -n 3", len(hits))
	}
	for _, h := range hits {
		// fire sema N calls sample_sema_fire(r, 1) for r in [0, N).
		if h.PID != p.PID() || h.Function != "sample_sema_fire" || string(h.Args[0]) != "0" || string(h.Args[1]) != "1" {
			t.Errorf("hit %+v", h)
		}
	}
}

func TestTraceFuncErrors(t *testing.T) {
	testkit.RequireKernel(t)
	fx := testkit.Fixture("func_args")
	for _, c := range []struct {
		args []string
		code int
		msgs []string
	}{
		{[]string{"uprobe:" + fx + ":nosuch"}, 1, []string{fx, `"nosuch"`, "not found"}},
		{[]string{"uretprobe:" + fx + ":nosuch"}, 1, []string{fx, `"nosuch"`, "not found"}},
		{[]string{"uprobe:" + fx + ":nosuch*"}, 1, []string{fx, `"nosuch*"`, "no function matches"}},
		{[]string{"uprobe:/nonexistent/file:f"}, 1, []string{"/nonexistent/file", "no such file"}},
		{[]string{"--str", "1", "uretprobe:" + fx + ":sum6"}, 2, []string{"--str", "uretprobe", "return value"}},
		{[]string{"uprobe:" + fx}, 2, []string{"uprobe:TARGET:FUNC"}},
		{[]string{"uretprobe:" + fx + ":"}, 2, []string{"uretprobe:TARGET:FUNC"}},
		{[]string{fx + ":sum6"}, 2, []string{"uprobe:" + fx + ":sum6"}},
		{[]string{"uprobe:" + testkit.Fixture("usdt_sample_i386") + ":main"}, 1, []string{"usdt_sample_i386", "function probes"}},
		// The launched command's failure is the trace's, after its hits.
		{append(launchedLibrary(t), "uprobe:libc.so.6:exit", "--", "false"), 1, []string{"false", "exit status 1"}},
	} {
		// 60 s: a trace of libc's exit with libc6-dbg installed reads
		// the debug file's DWARF for exit's parameters first (0.5 s,
		// about 14 s under -race on a loaded machine).
		r := runTraceWithin(t, 60*time.Second, c.args...)
		bad := r.code != c.code
		for _, m := range c.msgs {
			bad = bad || !strings.Contains(r.errOut, m)
		}
		if bad || strings.Contains(r.errOut, "/proc/self/fd") {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", c.args, r.code, r.errOut, c.code, c.msgs)
		}
	}
	// With -p, errors name the target as given.
	p := testkit.Start(t, testkit.Fixture("usdt_sample"))
	// 60 s: under emulation (the 5.10 VM) this took over 10.
	r := runTraceWithin(t, 60*time.Second, "-p", itoa(p.PID()), "uprobe:usdt_sample:nosuch")
	if r.code != 1 || !strings.Contains(r.errOut, "usdt_sample") || !strings.Contains(r.errOut, `"nosuch"`) || strings.Contains(r.errOut, "/proc/self/fd") {
		t.Errorf("-p: exit %d, %q", r.code, r.errOut)
	}
}

// TestTraceGlobSitesSame: trace and trace -f resolve a glob alike
// (uprobe.Binary.Resolve): on a binary where probe_plain_a_alias is
// another name of probe_plain_a, both attach one site per address, named
// by the same rule, and count the same hits; a function the kernel
// refuses is skipped with one warning, not counted, and does not fail
// the others.
func TestTraceGlobSitesSame(t *testing.T) {
	testkit.RequireKernel(t)
	fx := testkit.Fixture("lock_entry")
	const want = "COUNT  PROBE\n    7  uprobe:probe_plain_a\n    7  uprobe:probe_plain_b\n"
	for _, args := range [][]string{
		{"--count", "uprobe:" + fx + ":probe_plain*", "--", fx, "7"},
		{"-f", "--count", "uprobe:" + fx + ":probe_plain*", "--", fx, "7"},
	} {
		r := runTraceWithin(t, 30*time.Second, args...)
		got := r.out
		if i := strings.Index(got, "COUNT"); i >= 0 {
			got = got[i:] // after -f's attach and detach lines
		}
		if r.code != 0 || got != want {
			t.Errorf("trace %v: exit %d, %q, stderr %q; want %q", args, r.code, r.out, r.errOut, want)
		}
	}
	if runtime.GOARCH != "amd64" {
		return
	}
	r := runTraceWithin(t, 30*time.Second, "--count", "uprobe:"+fx+":probe_*", "--", fx, "7")
	const warn = `skipped 1 of the 3 functions matching "probe_*": 1: the kernel cannot probe this site (probe_locked, ...)`
	if r.code != 0 || r.out != want || !strings.Contains(r.errOut, warn) {
		t.Errorf("probe_*: exit %d, %q, stderr %q; want %q and the warning %q", r.code, r.out, r.errOut, want, warn)
	}
}
