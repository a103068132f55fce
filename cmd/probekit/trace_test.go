package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/probekit/probekit/internal/features"
	"github.com/probekit/probekit/internal/test/bpftest"
	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/record"
	"github.com/probekit/probekit/usdt"
)

// traceResult is what a run of probekit trace left.
type traceResult struct {
	code        int
	out, errOut string
}

// runTraceCmd runs probekit trace with args. It touches no testing.T, so
// that a test may run it off its goroutine.
func runTraceCmd(args ...string) traceResult {
	var out, errOut bytes.Buffer
	code := run(append([]string{"trace"}, args...), &out, &errOut)
	return traceResult{code, out.String(), errOut.String()}
}

// traceJSON runs probekit trace --json with args and decodes its lines.
func traceJSON(t *testing.T, args ...string) []hitLine {
	t.Helper()
	r := runTraceCmd(append([]string{"--json"}, args...)...)
	if r.code != 0 {
		t.Fatalf("probekit trace %v: exit %d: %s", args, r.code, r.errOut)
	}
	return decodeHits(t, r.out)
}

func decodeHits(t *testing.T, out string) []hitLine {
	t.Helper()
	var hits []hitLine
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var h hitLine
		if err := json.Unmarshal([]byte(line), &h); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		if followNotice(h.Kind) {
			continue
		}
		hits = append(hits, h)
	}
	return hits
}

// hitLine keeps arguments as their JSON text: uint64 stays exact, and a
// string argument (--str) is its quoted text.
type hitLine struct {
	Kind     string            `json:"kind"`
	Provider string            `json:"provider"`
	Name     string            `json:"name"`
	PID      int               `json:"pid"`
	TID      int               `json:"tid"`
	Address  uint64            `json:"address"`
	Args     []json.RawMessage `json:"args"`
	Comm     string            `json:"comm"`
	TimeNS   uint64            `json:"time_ns"`
	Time     time.Time         `json:"time"`
}

// Launch mode: the fixture fires sample:sizes three times as soon as it
// starts; every hit is printed with its values, unsigned ones unsigned,
// and the command's exit ends the trace.
func TestTraceLaunch(t *testing.T) {
	testkit.RequireKernel(t)
	fixture := testkit.Fixture("usdt_sample")
	hits := traceJSON(t, fixture+":sample:sizes", "--", fixture, "--loop", "sizes", "3")

	// The same rounds, as the fixture reports them when driven.
	want := testkit.Start(t, fixture).Fire("sizes", 3)
	f, err := usdt.Open(fixture)
	if err != nil {
		t.Fatal(err)
	}
	probe, _ := f.Find("sample", "sizes")
	if len(hits) != len(want) {
		t.Fatalf("%d hits, want %d: %+v", len(hits), len(want), hits)
	}
	for i, h := range hits {
		if h.Provider != "sample" || h.Name != "sizes" || h.Address != probe.Locations[0].Address || h.PID == 0 || h.PID != h.TID {
			t.Errorf("hit %d: %+v", i, h)
		}
		for n, a := range h.Args {
			arg := probe.Locations[0].Args[n]
			w := want[i].Args[n]
			exp := signedOrUnsigned(w, arg.Signed)
			if string(a) != exp {
				t.Errorf("hit %d arg %d (%s): %s, want %s", i, n, arg, a, exp)
			}
		}
	}
}

func signedOrUnsigned(v int64, signed bool) string {
	if signed {
		return jsonInt(v)
	}
	return jsonUint(uint64(v))
}

func jsonInt(v int64) string   { b, _ := json.Marshal(v); return string(b) }
func jsonUint(v uint64) string { b, _ := json.Marshal(v); return string(b) }

// Globs and several sites: sample:inlined's three locations each report
// their own address.
func TestTraceGlobSites(t *testing.T) {
	testkit.RequireKernel(t)
	fixture := testkit.Fixture("usdt_sample")
	hits := traceJSON(t, fixture+":sam*:inl?ned", "--", fixture, "--loop", "inlined", "2")
	if len(hits) != 6 {
		t.Fatalf("%d hits, want 6", len(hits))
	}
	addrs := map[uint64]int{}
	for _, h := range hits {
		addrs[h.Address]++
	}
	if len(addrs) != 3 {
		t.Fatalf("addresses %v, want three sites twice each", addrs)
	}
	for a, n := range addrs {
		if n != 2 {
			t.Errorf("site %#x fired %d times, want 2", a, n)
		}
	}
}

// -n stops after COUNT hits of an attached process (-p). The fixture
// fires until the tracer has attached and seen four hits, for as long as
// loading and attaching take, within a time limit.
func TestTracePIDCount(t *testing.T) {
	testkit.RequireKernel(t)
	fixture := testkit.Fixture("usdt_sample")
	p := testkit.Start(t, fixture)
	r := traceWhileFiring(t, p, "consts", "--json", "-p", itoa(p.PID()), "-n", "4", fixture+":sample:consts")
	hits := decodeHits(t, r.out)
	if len(hits) != 4 {
		t.Fatalf("%d hits with -n 4", len(hits))
	}
	for _, h := range hits {
		if h.PID != p.PID() || len(h.Args) != 5 || string(h.Args[4]) != "9223372036854775807" || string(h.Args[3]) != "65535" {
			t.Fatalf("hit %+v", h)
		}
	}
}

// traceWhileFiring runs probekit trace with args (an -n COUNT trace of
// p) and makes p fire probe every 5 ms until the trace ends, for as long
// as loading and attaching take, within 30 s. The trace must succeed.
func traceWhileFiring(t *testing.T, p *testkit.Process, probe string, args ...string) traceResult {
	t.Helper()
	return traceWhile(t, p, "fire "+probe+" 1", args...)
}

// traceWhile runs probekit trace with args (an -n COUNT trace of p) and
// sends p command (a line of its protocol) every 5 ms until the trace
// ends, within traceWhileLimit. The trace must succeed.
func traceWhile(t *testing.T, p *testkit.Process, command string, args ...string) traceResult {
	t.Helper()
	done := make(chan traceResult, 1)
	go func() { done <- runTraceCmd(args...) }()
	deadline := time.After(traceWhileLimit)
	for {
		select {
		case r := <-done:
			if r.code != 0 {
				t.Fatalf("probekit trace %v: exit %d: %s", args, r.code, r.errOut)
			}
			return r
		case <-deadline:
			// The tracer ends with the fixture (Cleanup stops it).
			t.Fatalf("probekit trace %v did not end within %v", args, traceWhileLimit)
		case <-time.After(5 * time.Millisecond):
			p.Do(command)
		}
	}
}

// traceWhileLimit bounds a traceWhile trace, its load included: Linux
// 5.10's verifier took 84 s under the VM matrix's emulation to load the
// function program with --stack (TestTraceStackGo), where a load takes
// well under a second on hardware.
const traceWhileLimit = 3 * time.Minute

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

// Python's probes are gated by semaphores: probekit trace raises the
// semaphore and sees every call.
func TestTracePython(t *testing.T) {
	testkit.RequireKernel(t)
	const python = "/usr/bin/python3.11"
	if _, err := os.Stat(python); err != nil {
		testkit.Unavailable(t, "%s: %v", python, err)
	}
	// CPython 3.11 fires function__entry only while a trace or profile
	// function is set (its ceval checks use_tracing first), so the script
	// installs an empty one.
	script := "import sys\nsys.setprofile(lambda *a: None)\ndef probekit_fn(n):\n    return n + 1\nfor i in range(7):\n    probekit_fn(i)\n"
	f, err := usdt.Open(python)
	if err != nil {
		t.Fatal(err)
	}
	probe, err := f.Find("python", "function__entry")
	if err != nil {
		t.Fatal(err)
	}
	if probe.Locations[0].Semaphore == 0 {
		t.Fatal("python:function__entry has no semaphore; the test means nothing")
	}
	// That a bare uprobe at a gated site never fires is shown on the
	// project's own fixture (usdt.TestSemaphore): a bare uprobe on the
	// system's python3.11 would fail, or make others fail, whenever
	// another tracer holds the site with its semaphore.

	// With probekit trace, every call of probekit_fn is seen: the
	// strings its first two arguments point to are the file and the
	// function, the third is the line of the def.
	hits := traceJSON(t, "--str", "1,2", python+":python:function__entry", "--", python, "-c", script)
	calls := 0
	for _, h := range hits {
		if len(h.Args) == 3 && string(h.Args[0]) == `"<string>"` && string(h.Args[1]) == `"probekit_fn"` && string(h.Args[2]) == "3" {
			calls++
		}
	}
	if calls != 7 {
		t.Fatalf("%d entries at line 3 among %d hits, want 7", calls, len(hits))
	}
}

func TestTraceErrors(t *testing.T) {
	testkit.RequireKernel(t)
	fixture := testkit.Fixture("usdt_sample")
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"trace"}, 2, "want at least one"},
		{[]string{"trace", "nocolons"}, 2, "TARGET:PROVIDER:NAME"},
		{[]string{"trace", "-p", "1", fixture + ":sample:zero", "--", "true"}, 2, "exclude"},
		{[]string{"trace", "/nonexistent:p:n"}, 1, "no such file"},
		{[]string{"trace", fixture + ":sample:nosuch"}, 1, "not found"},
		{[]string{"trace", "/bin/true:p:n"}, 1, "no USDT probes"},
		{[]string{"trace", fixture + ":sample:zero", "--"}, 2, "needs a command"},
		{[]string{"trace", "--str", "0", fixture + ":sample:zero"}, 2, "from 1 to 12"},
		{[]string{"trace", "--str", "1,2,3,4,5", fixture + ":sample:zero"}, 2, "at most 4"},
	} {
		var out, errOut bytes.Buffer
		code := run(c.args, &out, &errOut)
		if code != c.code || !strings.Contains(errOut.String(), c.msg) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", c.args, code, errOut.String(), c.code, c.msg)
		}
	}
}

func execOutput(name string, args ...string) ([]byte, error) {
	return exec.Command(name, args...).CombinedOutput()
}

// A PID filter is a process filter: hits from another thread of the
// traced process are seen (uprobe_multi filtered by thread before kernel
// 46ba0e49b642; probekit uses it only with the fix).
func TestTraceThreads(t *testing.T) {
	testkit.RequireKernel(t)
	const python = "/usr/bin/python3.11"
	if _, err := os.Stat(python); err != nil {
		testkit.Unavailable(t, "%s: %v", python, err)
	}
	script := "import sys, threading\n" +
		"threading.setprofile(lambda *a: None)\n" +
		"def probekit_in_thread():\n    pass\n" +
		"t = threading.Thread(target=lambda: [probekit_in_thread() for _ in range(3)])\n" +
		"t.start(); t.join()\n"
	hits := traceJSON(t, "--str", "2", python+":python:function__entry", "--", python, "-c", script)
	n := 0
	for _, h := range hits {
		if string(h.Args[1]) == `"probekit_in_thread"` {
			n++
			if h.TID == h.PID {
				t.Errorf("hit from the main thread: %+v", h)
			}
		}
	}
	if n != 3 {
		t.Fatalf("%d calls seen from the second thread, want 3", n)
	}
}

// OpenJDK: every probe of libjvm.so (531 sites of 517 probes, one
// uprobe_multi link) while `java -version` runs: the VM's own lifecycle
// probes fire exactly once, class loading hundreds of times.
func TestTraceJava(t *testing.T) {
	testkit.RequireKernel(t)
	const (
		java   = "/usr/lib/jvm/java-17-openjdk-amd64/bin/java"
		libjvm = "/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so"
	)
	if _, err := os.Stat(libjvm); err != nil {
		testkit.Unavailable(t, "openjdk-17-jre-headless: %v", err)
	}
	hits := traceJSON(t, append(launchedLibrary(t), libjvm+":hotspot:*", "--", java, "-version")...)
	count := map[string]int{}
	for _, h := range hits {
		if h.Provider != "hotspot" {
			t.Fatalf("hit of %s:%s", h.Provider, h.Name)
		}
		count[h.Name]++
	}
	for _, once := range []string{"vm__init__begin", "vm__init__end", "vm__shutdown"} {
		if count[once] != 1 {
			t.Errorf("hotspot:%s fired %d times, want 1", once, count[once])
		}
	}
	if count["class__loaded"] < 100 || count["thread__start"] < 1 {
		t.Errorf("class__loaded %d, thread__start %d: too few", count["class__loaded"], count["thread__start"])
	}
	t.Logf("%d hits of %d hotspot probes", len(hits), len(count))
}

// -p: the trace ends, after printing every event, when the process exits.
func TestTracePIDExit(t *testing.T) {
	testkit.RequireKernel(t)
	fixture := testkit.Fixture("usdt_sample")
	p := testkit.Start(t, fixture)
	pr, pw := io.Pipe()
	// Should the test fail early, the tracer's writes fail: it ends.
	t.Cleanup(func() { pr.Close() })
	code := make(chan int, 1)
	go func() {
		var errOut bytes.Buffer
		c := run([]string{"trace", "--json", "-p", itoa(p.PID()), fixture + ":sample:zero"}, pw, &errOut)
		pw.CloseWithError(fmt.Errorf("exit %d: %s", c, errOut.String()))
		code <- c
	}()
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-t.Context().Done():
				return
			}
		}
	}()
	// Fire until the tracer shows it is attached: its first hit.
	deadline := time.After(10 * time.Second)
	for attached := false; !attached; {
		p.Fire("zero", 1)
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("trace ended before the process did")
			}
			if !strings.Contains(l, `"name":"zero"`) {
				t.Fatalf("line %q", l)
			}
			attached = true
		case <-time.After(20 * time.Millisecond):
		case <-deadline:
			t.Fatal("no hit within 10s")
		}
	}
	p.Stop()
	go func() {
		for range lines {
		}
	}()
	select {
	case c := <-code:
		if c != 0 {
			t.Fatalf("exit %d", c)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("probekit trace -p did not exit with its process")
	}
}

// A burst of a million hits reaches a pipe whole: the ring, the wakeups
// and the output keep up, nothing is lost.
func TestTraceBurst(t *testing.T) {
	testkit.RequireKernel(t)
	n := 1_000_000
	if raceBuild() {
		// The race detector slows the reader three times or more, below
		// the fixture's rate: 100,000 hits, which the ring holds whole.
		n = 100_000
	}
	fixture := testkit.Fixture("usdt_sample")
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	type count struct {
		lines int
		last  string
		err   error
	}
	counted := make(chan count, 1)
	go func() {
		var c count
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			c.lines++
			c.last = sc.Text()
		}
		c.err = sc.Err()
		counted <- c
	}()
	var errOut bytes.Buffer
	code := run([]string{"trace", fixture + ":sample:loop", "--", fixture, "--loop", "loop", itoa(n)}, pw, &errOut)
	pw.Close()
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	c := <-counted
	if c.err != nil {
		t.Fatal(c.err)
	}
	// The last round's arguments: r, r + 1, -r, (int32)r.
	if c.lines != n || !strings.Contains(c.last, " sample:loop @") ||
		!strings.HasSuffix(c.last, fmt.Sprintf("[%d %d %d %d]", n-1, n, -(n-1), n-1)) {
		t.Fatalf("%d lines, want %d; last %q", c.lines, n, c.last)
	}
}

// raceBuild reports whether the test binary was built with -race.
func raceBuild() bool {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "-race" {
				return s.Value == "true"
			}
		}
	}
	return false
}

func TestTracePIDZero(t *testing.T) {
	for _, args := range [][]string{
		{"trace", "-p", "0", "usdt_sample:sample:zero"},
		{"list", "-p", "0"},
		{"list", "-p", "0", "sample:*"},
	} {
		var out, errOut bytes.Buffer
		if code := run(args, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "invalid PID") {
			t.Errorf("%v: exit %d, %q; want 2 and invalid PID", args, code, errOut.String())
		}
	}
}

// runTraceWithin runs probekit trace, failing the test if it has not
// returned within d (a refusal must not turn into a wait).
func runTraceWithin(t *testing.T, d time.Duration, args ...string) traceResult {
	t.Helper()
	done := make(chan traceResult, 1)
	go func() { done <- runTraceCmd(args...) }()
	select {
	case r := <-done:
		return r
	case <-time.After(d):
		t.Fatalf("probekit trace %v still running after %v", args, d)
		return traceResult{}
	}
}

// A kernel thread (PF_KTHREAD in /proc/PID/stat) has no user space: no
// probe of it can fire, and the trace would wait forever.
func TestTraceKernelThread(t *testing.T) {
	testkit.RequireKernel(t)
	pid := kernelThread(t)
	r := runTraceWithin(t, 10*time.Second, "-p", itoa(pid), testkit.Fixture("usdt_sample")+":sample:zero")
	if r.code != 1 || !strings.Contains(r.errOut, "kernel thread: no user space to trace") {
		t.Errorf("exit %d, %q", r.code, r.errOut)
	}
}

// kernelThread finds a kernel thread (PF_KTHREAD, 0x00200000 in the
// flags, include/linux/sched.h): kthreadd is PID 2 outside PID
// namespaces.
func kernelThread(t *testing.T) int {
	const pfKthread = 0x00200000
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// Fields after the parenthesised command: state is field 3,
		// flags field 9.
		i := bytes.LastIndexByte(b, ')')
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 7 {
			continue
		}
		if flags, err := strconv.ParseUint(f[6], 10, 64); err == nil && flags&pfKthread != 0 {
			return pid
		}
	}
	testkit.Unavailable(t, "no kernel thread visible in /proc (a PID namespace?)")
	return 0
}

// A file of another architecture is refused, naming both, in every
// mode; listing it is fine.
func TestTraceForeignMachine(t *testing.T) {
	testkit.RequireKernel(t)
	foreign, arch, host := "usdt_sample_aarch64", "aarch64", "x86_64"
	switch runtime.GOARCH {
	case "amd64":
	case "arm64":
		foreign, arch, host = "usdt_sample", "x86_64", "aarch64"
	default:
		t.Skipf("no fixture of another architecture named for %s", runtime.GOARCH)
	}
	path := testkit.Fixture(foreign)
	refused := func() {
		t.Helper()
		for _, args := range [][]string{
			{path + ":sample:zero"},
			{path + ":sample:zero", "--", "true"},
			{"--json", path + ":sample:*"},
		} {
			r := runTraceWithin(t, 10*time.Second, args...)
			if r.code != 1 || !strings.Contains(r.errOut, arch) || !strings.Contains(r.errOut, host) || !strings.Contains(r.errOut, path) {
				t.Errorf("%v: exit %d, %q; want a refusal naming %s and %s", args, r.code, r.errOut, arch, host)
			}
		}
	}
	refused()
	// Without BPF cookies (Linux 5.10) a trace of every process is a
	// host watch, which waited for ever for a process to map the file.
	defer features.ForceOff(features.Cookie)()
	refused()
	var out, errOut bytes.Buffer
	if code := run([]string{"list", path}, &out, &errOut); code != 0 || !strings.Contains(out.String(), "sample:zero") {
		t.Errorf("list %s: exit %d, %q", path, code, errOut.String())
	}
}

// With -p, errors name the target as the user gave it, never the
// descriptor the tracer opened it as.
func TestTracePIDErrorsNameTarget(t *testing.T) {
	testkit.RequireKernel(t)
	fixture := testkit.Fixture("usdt_sample")
	p := testkit.Start(t, fixture)
	pid := itoa(p.PID())
	for _, c := range []struct {
		probe, name, msg string
	}{
		{"/bin/true:p:n", "/bin/true", "no USDT probes"},
		{fixture + ":p:n", fixture, "not found"},
		{fixture + ":sample:nosuch*", fixture, "not found"},
		{"/nonexistent/file:p:n", "/nonexistent/file", "no such file"},
	} {
		r := runTraceWithin(t, 10*time.Second, "-p", pid, c.probe)
		if r.code != 1 || !strings.Contains(r.errOut, c.name) || !strings.Contains(r.errOut, c.msg) || strings.Contains(r.errOut, "/proc/self/fd") {
			t.Errorf("%s: exit %d, %q; want %q and %q", c.probe, r.code, r.errOut, c.name, c.msg)
		}
	}
}

// BenchmarkTraceHit measures what a hit of sample:loop (4 arguments)
// costs the traced program: with no probe, under a program that reads
// the arguments and counts (internal/test/bpftest's count_args4), and under
// probekit trace -p printing to a pipe that is read. ns/op is per hit;
// cpu-ns/hit is the fixture's own CPU time per hit (the handler runs in
// its context), which other load on the machine does not inflate. Every
// hit must reach the pipe.
func BenchmarkTraceHit(b *testing.B) {
	testkit.RequireKernel(b)
	fixture := testkit.Fixture("usdt_sample")
	b.Run("no_probe", func(b *testing.B) {
		p := testkit.Start(b, fixture)
		b.ResetTimer()
		loopCPU(b, p)
	})
	b.Run("count", func(b *testing.B) {
		p := testkit.Start(b, fixture)
		coll := attachCount(b, p, fixture, "count_args4")
		b.ResetTimer()
		loopCPU(b, p)
		b.StopTimer()
		var n uint64
		if err := coll.Maps["counts"].Lookup(uint32(0), &n); err != nil || n != uint64(b.N) {
			b.Fatalf("counted %d hits (%v), want %d", n, err, b.N)
		}
	})
	b.Run("trace", func(b *testing.B) { benchTraceHit(b, fixture) })
}

// attachCount attaches internal/test/bpftest's program prog to
// sample:loop of p, until the benchmark ends, and returns its collection.
func attachCount(b *testing.B, p *testkit.Process, fixture, prog string) *ebpf.Collection {
	spec, err := bpftest.LoadCount()
	if err != nil {
		b.Fatal(err)
	}
	if err := usdt.Prepare(spec); err != nil {
		b.Fatal(err)
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { coll.Close() })
	att, err := usdt.NewAttacher(spec, coll)
	if err != nil {
		b.Fatal(err)
	}
	l, err := att.Attach(coll.Programs[prog], fixture, "sample", "loop", &usdt.Options{PID: p.PID()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	return coll
}

// benchTraceHit is BenchmarkTraceHit's probekit trace case, with flags.
func benchTraceHit(b *testing.B, fixture string, flags ...string) {
	p := testkit.Start(b, fixture)
	pr, pw, err := os.Pipe()
	if err != nil {
		b.Fatal(err)
	}
	defer pr.Close()
	// Lines, and lines of rounds other than 0 (the warm-up fires
	// round 0 until the tracer shows it is attached).
	var lines, rounds atomic.Int64
	read := make(chan struct{})
	go func() {
		defer close(read)
		br := bufio.NewReaderSize(pr, 1<<20)
		for {
			line, err := br.ReadSlice('\n')
			if len(line) > 0 && line[len(line)-1] == '\n' {
				lines.Add(1)
				if !bytes.HasSuffix(line, []byte(" [0 1 0 0]\n")) {
					rounds.Add(1)
				}
			}
			if err == bufio.ErrBufferFull {
				continue
			}
			if err != nil {
				return
			}
		}
	}()
	done := make(chan traceResult, 1)
	go func() {
		var errOut bytes.Buffer
		code := run(append([]string{"trace", "-p", itoa(p.PID()), fixture + ":sample:loop"}, flags...), pw, &errOut)
		pw.Close()
		done <- traceResult{code: code, errOut: errOut.String()}
	}()
	// Attached once a hit shows.
	for deadline := time.Now().Add(30 * time.Second); lines.Load() == 0; {
		if time.Now().After(deadline) {
			b.Fatal("no hit printed within 30s")
		}
		if err := p.Loop("loop", 1); err != nil {
			b.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	b.ResetTimer()
	loopCPU(b, p)
	b.StopTimer()
	p.Stop() // the trace ends with its process
	r := <-done
	<-read
	if r.code != 0 {
		b.Fatalf("exit %d: %s", r.code, r.errOut)
	}
	if n := rounds.Load(); n != int64(b.N-1) {
		b.Fatalf("%d lines of rounds 1 to %d, want %d", n, b.N-1, b.N-1)
	}
}

// loopCPU fires sample:loop b.N times and reports the fixture's CPU time
// per hit, from the first field of /proc/PID/schedstat (nanoseconds on a
// CPU).
func loopCPU(b *testing.B, p *testkit.Process) {
	b.Helper()
	loopCPUOf(b, p, "loop", "cpu-ns/hit")
}

// loopCPUOf makes the fixture run command b.N times and reports its CPU
// time per round as unit (cpu-ns/...) and, while BPF statistics are on
// (ebpf.EnableStats), the run time of the BPF programs of its probes per
// round (prog-ns/...; see progRuntime).
func loopCPUOf(b *testing.B, p *testkit.Process, command, unit string) {
	b.Helper()
	progs := progStats()
	before := schedRuntime(b, p.PID())
	if err := p.Loop(command, b.N); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(schedRuntime(b, p.PID())-before)/float64(b.N), unit)
	if ns, ok := progRuntime(progs, b.N); ok {
		b.ReportMetric(float64(ns)/float64(b.N), strings.Replace(unit, "cpu-", "prog-", 1))
	}
}

func schedRuntime(b *testing.B, pid int) uint64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
	if err != nil {
		b.Fatal(err)
	}
	f := strings.Fields(string(data))
	if len(f) == 0 {
		b.Fatalf("schedstat %q", data)
	}
	ns, err := strconv.ParseUint(f[0], 10, 64)
	if err != nil {
		b.Fatal(err)
	}
	return ns
}

func TestTraceRingSizeFlag(t *testing.T) {
	for _, c := range []struct {
		arg  string
		want int // 0: refused
	}{
		{"16M", 16 << 20}, {"64MiB", 64 << 20}, {"256k", 256 << 10}, {"1G", 1 << 30}, {"1048576", 1 << 20},
		{"3000", 0}, {"1K", 0}, {"2G", 0}, {"0", 0}, {"", 0}, {"M", 0}, {"-4M", 0}, {"16X", 0}, {"99999999999G", 0},
	} {
		req, err := parseTrace([]string{"--ring-size", c.arg, "f:p:n"})
		switch {
		case c.want == 0 && c.arg == "":
			if err != nil || req.RingSize != record.DefaultRingSize {
				t.Errorf("no --ring-size: %v, %+v", err, req)
			}
		case c.want == 0:
			var ue *usageError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), "--ring-size") {
				t.Errorf("--ring-size %q: %v, want a usage error", c.arg, err)
			}
		case err != nil || req.RingSize != c.want:
			t.Errorf("--ring-size %q: %v, %d bytes; want %d", c.arg, err, req.RingSize, c.want)
		}
	}
}

// launchedLibrary is what a trace of a shared library in a launched
// command needs on this kernel: nothing with BPF cookies; without them
// (before Linux 5.15) -f, the documented fallback, which attaches as the
// command maps the library (TestTraceLibraryNoCookie checks the refusal
// without it).
func launchedLibrary(t *testing.T) []string {
	t.Helper()
	ok, err := features.Have(features.Cookie)
	if err != nil {
		t.Fatal(err)
	}
	if ok {
		return nil
	}
	return []string{"-f"}
}

// followNotice tells a JSON line of following (attach, detach, ...) by its
// kind from a hit's (usdt, uprobe, uretprobe): a trace of every process,
// or one with -f, has them among the hits, and a kernel without BPF
// cookies (Linux 5.10) attaches in each process.
func followNotice(kind string) bool {
	switch kind {
	case "", "usdt", "uprobe", "uretprobe":
		return false
	}
	return true
}
