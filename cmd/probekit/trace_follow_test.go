package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/probekit/probekit/internal/features"
	"github.com/probekit/probekit/internal/test/testkit"
)

// followPython is the interpreter of the -f tests (Debian's CPython 3.11,
// with USDT probes).
const followPython = "/usr/bin/python3.11"

// followLine is a line of trace -f --json: a hit or a notification.
type followLine struct {
	Kind string            `json:"kind"`
	PID  int               `json:"pid"`
	File string            `json:"file"`
	Name string            `json:"name"`
	Args []json.RawMessage `json:"args"`
}

func decodeFollow(t *testing.T, out string) []followLine {
	t.Helper()
	var lines []followLine
	for _, s := range strings.Split(strings.TrimSpace(out), "\n") {
		if s == "" {
			continue
		}
		var l followLine
		if err := json.Unmarshal([]byte(s), &l); err != nil {
			t.Fatalf("line %q: %v", s, err)
		}
		lines = append(lines, l)
	}
	return lines
}

// hitsByPID counts the lines of kind by PID; counts are the counts,
// sorted.
func hitsByPID(lines []followLine, kind string) (byPID map[int]int, counts []int) {
	byPID = map[int]int{}
	for _, l := range lines {
		if l.Kind == kind {
			byPID[l.PID]++
		}
	}
	for _, n := range byPID {
		counts = append(counts, n)
	}
	slices.Sort(counts)
	return byPID, counts
}

// calls counts the hits of function__entry for function fn by PID.
func callsByPID(lines []followLine, fn string) map[int]int {
	by := map[int]int{}
	for _, l := range lines {
		if l.Kind == "usdt" && len(l.Args) == 3 && string(l.Args[1]) == `"`+fn+`"` {
			by[l.PID]++
		}
	}
	return by
}

func kinds(lines []followLine, kind string) map[int]bool {
	pids := map[int]bool{}
	for _, l := range lines {
		if l.Kind == kind {
			pids[l.PID] = true
		}
	}
	return pids
}

// followScript writes a Python script that sets a profiler (CPython 3.11
// fires function__entry only then) and runs body.
func followScript(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "s.py")
	src := "import sys, os, time\nsys.setprofile(lambda *a: None)\ndef probekit_a():\n    pass\ndef probekit_b():\n    pass\n" + body
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func requirePython(t *testing.T) {
	t.Helper()
	testkit.RequireKernel(t)
	if _, err := os.Stat(followPython); err != nil {
		testkit.Unavailable(t, "%s: %v", followPython, err)
	}
}

// TestTraceFollowLaunch: -f -- sh -c 'python a; python b' shows both
// pythons' calls, each from its own PID, and says when each process was
// attached and released.
func TestTraceFollowLaunch(t *testing.T) {
	requirePython(t)
	a := followScript(t, "for _ in range(30):\n    probekit_a()\n")
	b := followScript(t, "for _ in range(40):\n    probekit_b()\n")
	r := runTraceWithin(t, 60*time.Second, "--json", "-f", "--str", "1,2", followPython+":python:function__entry", "--",
		"sh", "-c", followPython+" "+a+"; "+followPython+" "+b)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.errOut)
	}
	lines := decodeFollow(t, r.out)
	as, bs := callsByPID(lines, "probekit_a"), callsByPID(lines, "probekit_b")
	if len(as) != 1 || len(bs) != 1 {
		t.Fatalf("probekit_a called in %v, probekit_b in %v: want one process each", as, bs)
	}
	for pa, na := range as {
		for pb, nb := range bs {
			if pa == pb || na != 30 || nb != 40 {
				t.Fatalf("probekit_a: %d calls in pid %d, probekit_b: %d in pid %d; want 30 and 40 in two processes", na, pa, nb, pb)
			}
			attached, detached := kinds(lines, "attach"), kinds(lines, "detach")
			if !attached[pa] || !attached[pb] || !detached[pa] || !detached[pb] {
				t.Errorf("attach events for %v, detach for %v: want both pythons", attached, detached)
			}
			// Each python's release comes after its last hit, its
			// attach before its first.
			for _, pid := range []int{pa, pb} {
				first, last, att, det := -1, -1, -1, -1
				for i, l := range lines {
					switch {
					case l.PID != pid:
					case l.Kind == "usdt":
						if first < 0 {
							first = i
						}
						last = i
					case l.Kind == "attach" && att < 0:
						att = i
					case l.Kind == "detach":
						det = i
					}
				}
				if att > first || det < last {
					t.Errorf("pid %d: attach at line %d, hits at %d..%d, detach at %d", pid, att, first, last, det)
				}
			}
		}
	}
}

// TestTraceFollowPID: -f -p PID sees the calls of children the process
// forks after the trace started.
func TestTraceFollowPID(t *testing.T) {
	requirePython(t)
	dir := t.TempDir()
	start := filepath.Join(dir, "go")
	s := followScript(t, "while not os.path.exists("+quotePy(start)+"):\n    time.sleep(0.01)\n"+
		"for _ in range(2):\n    pid = os.fork()\n    if pid == 0:\n        for _ in range(25):\n            probekit_a()\n        os._exit(0)\n    os.waitpid(pid, 0)\n")
	cmd := exec.Command(followPython, s)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	pid := cmd.Process.Pid
	var out, errOut testkit.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run([]string{"trace", "--json", "-f", "--str", "1,2", "-p", strconv.Itoa(pid), followPython + ":python:function__entry"}, &out, &errOut)
	}()
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(out.String(), `"kind":"attach"`); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no attach within 20s: %s", errOut.String())
		}
	}
	if err := os.WriteFile(start, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("trace did not end with the process")
	}
	calls := callsByPID(decodeFollow(t, out.String()), "probekit_a")
	if len(calls) != 2 {
		t.Fatalf("probekit_a called in %d processes (%v), want 2 children", len(calls), calls)
	}
	for child, n := range calls {
		if child == pid || n != 25 {
			t.Errorf("pid %d: %d calls, want 25 in a child", child, n)
		}
	}
}

func quotePy(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func TestTraceFollowUsage(t *testing.T) {
	r := runTraceCmd("-f", "x:p:n")
	if r.code == 0 || !strings.Contains(r.errOut, "-f follows the descendants") {
		t.Fatalf("exit %d: %s", r.code, r.errOut)
	}
}

// TestTraceFollowDlopen: -p PID '*:sample:libonly' attaches a library the
// process loads after the trace started, and sees its hits.
func TestTraceFollowDlopen(t *testing.T) {
	requirePython(t)
	lib := testkit.Fixture("libusdt_lib.so")
	dir := t.TempDir()
	load, fire := filepath.Join(dir, "load"), filepath.Join(dir, "fire")
	// tick's calls (function__entry, with a profiler set) say that the
	// trace is attached before the library is loaded.
	src := "import ctypes, os, sys, time\nsys.setprofile(lambda *a: None)\ndef tick():\n    pass\n" +
		"def wait(p):\n    while not os.path.exists(p):\n        tick()\n        time.sleep(0.005)\n" +
		"wait(" + quotePy(load) + ")\nlib = ctypes.CDLL(" + quotePy(lib) + ")\n" +
		"wait(" + quotePy(fire) + ")\nfor i in range(6):\n    lib.usdt_lib_fire_libonly(i, 0)\n"
	cmd := exec.Command(followPython, "-c", src)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	var out, errOut testkit.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run([]string{"trace", "--json", "-p", strconv.Itoa(cmd.Process.Pid), "*:python:function__entry", "*:sample:libonly"}, &out, &errOut)
	}()
	waitOutput := func(what, s string) {
		for deadline := time.Now().Add(20 * time.Second); !strings.Contains(out.String(), s); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 20s: %s%s", what, out.String(), errOut.String())
			}
		}
	}
	waitOutput("tick's calls traced", `"name":"function__entry"`)
	if strings.Contains(out.String(), "libusdt_lib.so") {
		t.Fatal("the library is attached before it is loaded")
	}
	if err := os.WriteFile(load, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitOutput("the library attached after dlopen", `"kind":"attach","pid":`+strconv.Itoa(cmd.Process.Pid)+`,"file":`+quotePy(lib))
	if err := os.WriteFile(fire, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("trace did not end with the process")
	}
	n := 0
	for _, l := range decodeFollow(t, out.String()) {
		if l.Kind == "usdt" && l.Name == "libonly" && l.PID == cmd.Process.Pid {
			n++
		}
	}
	if n != 6 {
		t.Fatalf("%d hits of sample:libonly, want 6", n)
	}
}

// TestListAll: list '*' GLOB lists each file mapped on the host once, with
// the PIDs that map it.
func TestListAll(t *testing.T) {
	requirePython(t)
	var pids []int
	for range 2 {
		cmd := exec.Command(followPython, "-c", "import sys; sys.stdin.read()")
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			in.Close()
			cmd.Wait()
		}()
		pids = append(pids, cmd.Process.Pid)
	}
	code, out, errOut := runCmd("list", "--json", "*", "python:function__entry")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var doc struct {
		Objects []struct {
			Path   string `json:"path"`
			Inode  uint64 `json:"inode"`
			PIDs   []int  `json:"pids"`
			Probes []struct {
				Name string `json:"name"`
			} `json:"probes"`
		} `json:"objects"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	seen := 0
	for _, o := range doc.Objects {
		if o.Path != followPython {
			continue
		}
		seen++
		for _, want := range pids {
			if !slices.Contains(o.PIDs, want) {
				t.Errorf("%s: pids %v, want %d among them", o.Path, o.PIDs, want)
			}
		}
		if len(o.Probes) != 1 || o.Probes[0].Name != "function__entry" {
			t.Errorf("%s: probes %+v, want function__entry alone", o.Path, o.Probes)
		}
	}
	if seen != 1 {
		t.Fatalf("%s listed %d times, want once:\n%s", followPython, seen, out)
	}
}

// TestTraceFollowUprobe: -f with a function probe: each python of the
// launched shell has its calls of libc's getpid seen.
// TestTraceFollowExecNoCookie: without BPF cookies (before Linux 5.15;
// forced off on newer kernels) a function site is found by the process
// and its runtime address. Each func_args is a child of the shell,
// adopted at its fork while it runs the shell's image, which does not map
// func_args (a PIE); at its execve its probes are attached again in the
// new image, and every sum6 call of both is seen.
func TestTraceFollowExecNoCookie(t *testing.T) {
	testkit.RequireKernel(t)
	requireAMD64(t)
	defer features.ForceOff(features.Cookie)()
	fx := testkit.Fixture("func_args")
	r := runTraceWithin(t, 60*time.Second, "--json", "-f", "uprobe:"+fx+":sum6", "--", "sh", "-c", fx+" 2; "+fx+" 3")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.errOut)
	}
	byPID, counts := hitsByPID(decodeFollow(t, r.out), "uprobe")
	if !slices.Equal(counts, []int{2, 3}) {
		t.Fatalf("sum6 hits by pid %v, want 2 and 3 in two processes (stderr %s)", byPID, r.errOut)
	}
}

func TestTraceFollowUprobe(t *testing.T) {
	traceFollowUprobe(t)
}

// TestTraceFollowUprobeNoCookie: the same without BPF cookies: libc is a
// shared library, mapped by each python after its execve; its sites are
// keyed by each process's runtime address once its dynamic linker has
// mapped it (the _dl_debug_state stop), before python runs.
func TestTraceFollowUprobeNoCookie(t *testing.T) {
	testkit.RequireKernel(t)
	defer features.ForceOff(features.Cookie)()
	traceFollowUprobe(t)
}

func traceFollowUprobe(t *testing.T) {
	t.Helper()
	requirePython(t)
	a := followScript(t, "for _ in range(5):\n    os.getpid()\n")
	b := followScript(t, "for _ in range(7):\n    os.getpid()\n")
	r := runTraceWithin(t, 60*time.Second, "--json", "-f", "uprobe:libc.so.6:getpid", "--",
		"sh", "-c", followPython+" "+a+"; "+followPython+" "+b)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.errOut)
	}
	lines := decodeFollow(t, r.out)
	byPID, counts := hitsByPID(lines, "uprobe")
	// Python itself may call getpid too: at least 5 and 7 in two
	// processes.
	if len(counts) < 2 || counts[len(counts)-1] < 7 || counts[len(counts)-2] < 5 {
		t.Fatalf("getpid hits by pid %v, want at least 5 and 7 in two processes", byPID)
	}
	if attached := kinds(lines, "attach"); len(attached) < 3 {
		t.Errorf("attach events for %v, want the shell and both pythons", attached)
	}
}

// TestTraceLibraryNoCookie: without BPF cookies (before Linux 5.15;
// forced off on newer kernels) a USDT probe of a shared library in a
// launched command: without -f it is refused, naming the feature and its
// release, with the hint that -f attaches it (the command, stopped at its
// execve, has not mapped the library, whose runtime address its sites
// need); with -f it is attached as the command maps the library, and
// every hit is seen.
func TestTraceLibraryNoCookie(t *testing.T) {
	testkit.RequireKernel(t)
	defer features.ForceOff(features.Cookie)()
	lib, user := testkit.Fixture("libusdt_lib.so"), testkit.Fixture("usdt_lib_user")
	r := runTraceWithin(t, 60*time.Second, "--json", lib+":sample:libonly", "--", user, "--loop", "libonly", "3")
	if r.code == 0 || !strings.Contains(r.errOut, features.Cookie.String()) || !strings.Contains(r.errOut, "with -f") {
		t.Errorf("without -f: exit %d, stderr %q; want a refusal naming %s and -f", r.code, r.errOut, features.Cookie)
	}
	r = runTraceWithin(t, 60*time.Second, "--json", "-f", lib+":sample:libonly", "--", user, "--loop", "libonly", "3")
	if r.code != 0 {
		t.Fatalf("with -f: exit %d: %s", r.code, r.errOut)
	}
	var args []string
	for _, l := range decodeFollow(t, r.out) {
		if l.Kind == "usdt" && len(l.Args) == 1 {
			args = append(args, string(l.Args[0]))
		}
	}
	if want := []string{"0", "7", "14"}; !slices.Equal(args, want) {
		t.Errorf("sample:libonly arguments %v, want %v (stdout %s, stderr %s)", args, want, r.out, r.errOut)
	}
}
