package python_test

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/probekit/probekit/bpfunwind"
	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/interp"
	"github.com/probekit/probekit/interp/python"
	"github.com/probekit/probekit/interp/python/internal/pytest"
	"github.com/probekit/probekit/procmaps"
	"github.com/probekit/probekit/uprobe"
)

// pythons are the interpreters the kernel test runs, by subtest name:
// Debian 12's (statically linked libpython, no DWARF: the table) and
// pyenv's builds (libpython3.X.so with DWARF).
var pythons = []struct {
	name, path string
	source     python.Source // forced, 0 for Find's choice
	want       python.Source
}{
	{"debian-3.11", "/usr/bin/python3.11", 0, debianSource()},
	{"debian-3.11-table", "/usr/bin/python3.11", python.SourceTable, python.SourceTable},
	{"3.11", "/root/.pyenv/versions/3.11.7/bin/python3.11", 0, python.SourceDWARF},
	{"3.11-table", "/root/.pyenv/versions/3.11.7/bin/python3.11", python.SourceTable, python.SourceTable},
	{"3.12", "/root/.pyenv/versions/3.12.1/bin/python3.12", 0, python.SourceDWARF},
	{"3.13", "/root/.pyenv/versions/3.13.0/bin/python3.13", 0, python.SourceDWARF},
	{"3.13-debugoffsets", "/root/.pyenv/versions/3.13.0/bin/python3.13", python.SourceDebugOffsets, python.SourceDebugOffsets},
	{"3.10", "/root/.pyenv/versions/3.10.13/bin/python3.10", 0, python.SourceDWARF},
	{"3.9", "/root/.pyenv/versions/3.9.18/bin/python3.9", 0, python.SourceDWARF},
	{"3.8", "/root/.pyenv/versions/3.8.18/bin/python3.8", 0, python.SourceDWARF},
}

// debianSource is where Find takes Debian's 3.11 offsets from: its
// debug file's DWARF when python3.11-dbg is installed, else the table.
func debianSource() python.Source {
	out, err := exec.Command("readelf", "-n", "/usr/bin/python3.11").Output()
	if err != nil {
		return python.SourceTable
	}
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "Build" && f[1] == "ID:" && len(f[2]) > 2 {
			if _, err := os.Stat("/usr/lib/debug/.build-id/" + f[2][:2] + "/" + f[2][2:] + ".debug"); err == nil {
				return python.SourceDWARF
			}
		}
	}
	return python.SourceTable
}

type rig struct {
	tables *python.Tables
	cfi    *bpfunwind.Tables
	coll   *ebpf.Collection
	rd     *ringbuf.Reader
}

// newRig loads pytest.c with the maps of python.Tables and
// bpfunwind.Tables, and attaches prog at pyfix_hit.
func newRig(t testing.TB, prog string) *rig {
	t.Helper()
	testkit.RequireKernel(t)
	tables, err := python.NewTables(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tables.Close() })
	cfi, err := bpfunwind.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cfi.Close() })
	spec, err := pytest.LoadPytest()
	if err != nil {
		t.Fatal(err)
	}
	if err := tables.Prepare(spec); err != nil {
		t.Fatal(err)
	}
	if err := cfi.Prepare(spec); err != nil {
		t.Fatal(err)
	}
	repl := tables.Replacements()
	maps.Copy(repl, cfi.Replacements())
	if err := uprobe.Prepare(spec); err != nil {
		t.Fatal(err)
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{MapReplacements: repl})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { coll.Close() })
	b, err := uprobe.Open(testkit.Fixture("libpyfix.so"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	l, err := b.Entry("pyfix_hit", coll.Programs[prog], nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	rd, err := ringbuf.NewReader(coll.Maps["events"])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rd.Close() })
	return &rig{tables: tables, cfi: cfi, coll: coll, rd: rd}
}

// call is one line the script prints: the stack at a call of pyfix_hit.
type call struct {
	N         int      `json:"n"`
	GIL       bool     `json:"gil"`
	Thread    string   `json:"thread"`
	Frames    [][3]any `json:"frames"`
	Qualnames []string `json:"qualnames"`
}

// TestStack runs testdata/python/stack.py under each Python, reads its
// Python frames in BPF at each call of pyfix_hit (the GIL held and
// released, main thread and another), names them and compares them
// with traceback.extract_stack() at the same call, frame by frame.
func TestStack(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		testkit.Unavailable(t, "the pythons of this test are x86-64 builds")
	}
	r := newRig(t, "py_stack")
	script, err := filepath.Abs(filepath.Join(testkit.Root(), "testdata", "python", "stack.py"))
	if err != nil {
		t.Fatal(err)
	}
	lib, err := filepath.Abs(testkit.Fixture("libpyfix.so"))
	if err != nil {
		t.Fatal(err)
	}
	for _, py := range pythons {
		t.Run(py.name, func(t *testing.T) {
			if _, err := os.Stat(py.path); err != nil {
				testkit.Unavailable(t, "no %s", py.path)
			}
			r.run(t, py.path, script, lib, py.source, py.want)
		})
	}
}

// hit is one event of the script's process.
type hit struct {
	raw    []interp.Raw
	stop   python.Stop
	native []uint64
}

// session runs the script under pyPath with its offsets from source
// (0: Find's choice), changed by mutate if set, and returns its
// interpreter, the stacks it printed and the hits the BPF program sent,
// one per call. The process lives until the test ends.
func (r *rig) session(t *testing.T, pyPath, script, lib string, source python.Source, mutate func(*python.Interpreter)) (*python.Interpreter, []call, []hit) {
	return r.sessionIn(t, nil, pyPath, script, lib, source, mutate)
}

// sessionIn is session with the script run by the command prefix (which
// must exec Python as its only child) when prefix is set.
func (r *rig) sessionIn(t *testing.T, prefix []string, pyPath, script, lib string, source python.Source, mutate func(*python.Interpreter)) (*python.Interpreter, []call, []hit) {
	cmd := exec.Command(pyPath, script, lib)
	if len(prefix) > 0 {
		cmd = exec.Command(prefix[0], append(prefix[1:], pyPath, script, lib)...)
	}
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	deadline := time.Now().Add(20 * time.Second)
	next := func() string {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("the script ended early")
			}
			return l
		case <-time.After(time.Until(deadline)):
			t.Fatal("the script did not answer within 20s")
		}
		return ""
	}
	if l := next(); l != "ready" {
		t.Fatalf("script: %q, want ready", l)
	}
	pid := cmd.Process.Pid
	if len(prefix) > 0 {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
		if err != nil {
			t.Fatal(err)
		}
		if pid, err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil {
			t.Fatalf("%s's children: %q", prefix[0], b)
		}
	}
	proc, err := procmaps.Open(pid)
	if err != nil {
		t.Fatal(err)
	}
	in, err := python.FindWith(proc, &python.FindOptions{Source: source})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close() })
	if mutate != nil {
		mutate(in)
	}
	t.Logf("%s: CPython %v in %s, offsets from %v, _PyRuntime at %#x", pyPath, in.Version, in.Path, in.Source, in.Runtime)
	if len(in.EvalRanges()) == 0 {
		t.Error("no eval-loop range")
	}
	if err := r.tables.Add(proc.PID, in); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.tables.Remove(proc.PID) })
	if err := r.cfi.Add(proc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.cfi.Remove(proc.PID) })
	io.WriteString(stdin, "go\n")
	var calls []call
	for {
		l := next()
		if l == "done" {
			break
		}
		var c call
		if err := json.Unmarshal([]byte(l), &c); err != nil {
			t.Fatalf("script: %q: %v", l, err)
		}
		calls = append(calls, c)
	}
	if len(calls) != 6 {
		t.Fatalf("%d calls, want 6", len(calls))
	}
	var hits []hit
	for range calls {
		raw, stop, native := r.event(t, proc.PID, deadline)
		hits = append(hits, hit{raw, stop, native})
	}
	return in, calls, hits
}

func (r *rig) run(t *testing.T, pyPath, script, lib string, source, want python.Source) {
	in, calls, hits := r.session(t, pyPath, script, lib, source, nil)
	if in.Source != want {
		t.Errorf("offsets from %v, want %v", in.Source, want)
	}
	for i, c := range calls {
		raw, stop, native := hits[i].raw, hits[i].stop, hits[i].native
		what := fmt.Sprintf("call %d (gil held %v, thread %s)", c.N, c.GIL, c.Thread)
		if stop != python.StopEnd {
			t.Errorf("%s: walk ended by %v, want end", what, stop)
		}
		if len(raw) != len(c.Frames) {
			t.Errorf("%s: %d frames, want %d: %v", what, len(raw), len(c.Frames), raw)
		}
		for j := range min(len(raw), len(c.Frames)) {
			fr := in.Name(raw[j])
			name, file, line := c.Frames[j][0].(string), c.Frames[j][1].(string), int(c.Frames[j][2].(float64))
			qual := c.Qualnames[j]
			if fr.Func != qual || fr.File != file || fr.Line != line || fr.Unreadable != "" {
				t.Errorf("%s: frame %d is %s %s:%d %q, want %s (%s) %s:%d", what, j, fr.Func, fr.File, fr.Line, fr.Unreadable, qual, name, file, line)
			}
			if raw[j].Flags&interp.FlagBad != 0 {
				t.Errorf("%s: frame %d marked bad", what, j)
			}
		}
		if n := len(raw); n > 0 && raw[n-1].Flags&interp.FlagRunEnd == 0 {
			t.Errorf("%s: the outermost frame does not end a run", what)
		}
		// Each run of Python frames is run by one eval-loop frame on the
		// native stack.
		runs, evals := 0, 0
		for j, f := range raw {
			if f.Flags&interp.FlagRunEnd != 0 {
				runs++
			}
			if j < len(c.Qualnames) && strings.Contains(c.Qualnames[j], "<lambda>") && f.Flags&interp.FlagRunEnd == 0 {
				t.Errorf("%s: frame %d, called from C, does not end a run", what, j)
			}
		}
		for k, pc := range native {
			if k > 0 {
				pc-- // a return address: the call is before it
			}
			for _, rg := range in.EvalRanges() {
				if pc >= rg[0] && pc < rg[1] {
					evals++
				}
			}
		}
		if runs != evals {
			t.Errorf("%s: %d runs of Python frames, %d eval-loop frames in the native stack %#x", what, runs, evals, native)
		}
	}
}

// event reads the next hit of process pid: its Python frames, why
// their walk ended, its native stack.
func (r *rig) event(t *testing.T, pid int, deadline time.Time) ([]interp.Raw, python.Stop, []uint64) {
	t.Helper()
	for {
		r.rd.SetDeadline(deadline)
		rec, err := r.rd.Read()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatal("no hit within the deadline")
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(rec.RawSample) < 8+python.StackRecordSize+bpfunwind.StackRecordSize {
			t.Fatalf("event of %d bytes", len(rec.RawSample))
		}
		if int(binary.LittleEndian.Uint32(rec.RawSample)) != pid {
			continue // another process calling the fixture
		}
		raw, stop, err := python.DecodeStack(rec.RawSample[8:])
		if err != nil {
			t.Fatal(err)
		}
		native, nstop, err := bpfunwind.DecodeStack(rec.RawSample[8+python.StackRecordSize:])
		if err != nil {
			t.Fatal(err)
		}
		if nstop != bpfunwind.StopOutermost {
			t.Errorf("native walk ended by %v", nstop)
		}
		return raw, stop, native
	}
}

// benchScript calls pyfix_hit from inner, 5 Python frames deep, as many
// times as each line on stdin says, and prints a line after each batch.
const benchScript = `
import ctypes, sys
lib = ctypes.PyDLL(sys.argv[1])
def inner(n):
    for _ in range(n):
        lib.pyfix_hit(0)
def middle(n): inner(n)
def outer(n): middle(n)
print("ready", flush=True)
for line in sys.stdin:
    outer(int(line))
    print("done", flush=True)
`

// BenchmarkWalk is the BPF time per hit (the kernel's run-time
// statistics) of python.bpf.h's walk of 5 Python frames (py_walk), of
// an empty program (bare) for the uprobe's own cost, with ns/op the
// whole call's time seen from Python.
func BenchmarkWalk(b *testing.B) {
	for _, py := range pythons {
		if py.source != 0 {
			continue
		}
		for _, prog := range []string{"py_walk", "bare"} {
			b.Run(py.name+"/"+prog, func(b *testing.B) {
				if _, err := os.Stat(py.path); err != nil {
					b.Skipf("no %s", py.path)
				}
				benchWalk(b, py.path, prog)
			})
		}
	}
}

func benchWalk(b *testing.B, pyPath, prog string) {
	r := newRig(b, prog)
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		testkit.Unavailable(b, "BPF run-time statistics: %v", err)
	}
	defer stats.Close()
	lib, err := filepath.Abs(testkit.Fixture("libpyfix.so"))
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(pyPath, "-c", benchScript, lib)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { stdin.Close(); cmd.Wait() }()
	rd := bufio.NewReader(stdout)
	if l, err := rd.ReadString('\n'); err != nil || l != "ready\n" {
		b.Fatalf("script: %q %v", l, err)
	}
	proc, err := procmaps.Open(cmd.Process.Pid)
	if err != nil {
		b.Fatal(err)
	}
	in, err := python.Find(proc)
	if err != nil {
		b.Fatal(err)
	}
	defer in.Close()
	if err := r.tables.Add(proc.PID, in); err != nil {
		b.Fatal(err)
	}
	p := r.coll.Programs[prog]
	before, err := p.Stats()
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	fmt.Fprintf(stdin, "%d\n", b.N)
	if l, err := rd.ReadString('\n'); err != nil || l != "done\n" {
		b.Fatalf("script: %q %v", l, err)
	}
	b.StopTimer()
	after, err := p.Stats()
	if err != nil {
		b.Fatal(err)
	}
	runs := after.RunCount - before.RunCount
	if runs < uint64(b.N) {
		b.Fatalf("%d runs of %s for %d calls", runs, prog, b.N)
	}
	b.ReportMetric(float64((after.Runtime-before.Runtime).Nanoseconds())/float64(runs), "bpf-ns/hit")
}

// TestBadFrame walks Debian's 3.11 with a wrong offset of `previous`
// (that of stacktop, a small int): the second frame's read fails. The
// walk records the first frame, marks the second bad and stops with
// StopRead; Name gives the bad frame as Unreadable; the program runs on.
func TestBadFrame(t *testing.T) {
	const py = "/usr/bin/python3.11"
	if runtime.GOARCH != "amd64" {
		testkit.Unavailable(t, "the pythons of this test are x86-64 builds")
	}
	if _, err := os.Stat(py); err != nil {
		testkit.Unavailable(t, "no %s", py)
	}
	r := newRig(t, "py_stack")
	script, _ := filepath.Abs(filepath.Join(testkit.Root(), "testdata", "python", "stack.py"))
	lib, _ := filepath.Abs(testkit.Fixture("libpyfix.so"))
	in, calls, hits := r.session(t, py, script, lib, 0, func(in *python.Interpreter) {
		if in.Version.Minor != 11 {
			t.Fatalf("CPython %v, want 3.11", in.Version)
		}
		in.Offsets.FramePrevious = 64 // _PyInterpreterFrame.stacktop in 3.11
	})
	for i, h := range hits {
		if h.stop != python.StopRead || len(h.raw) != 2 {
			t.Errorf("call %d: %d frames, stop %v; want 2, read failed", calls[i].N, len(h.raw), h.stop)
			continue
		}
		if fr := in.Name(h.raw[0]); fr.Func != "inner" || h.raw[0].Flags&interp.FlagBad != 0 {
			t.Errorf("call %d: first frame %+v (flags %#x), want inner", calls[i].N, fr, h.raw[0].Flags)
		}
		if fr := in.Name(h.raw[1]); h.raw[1].Flags&interp.FlagBad == 0 || fr.Unreadable == "" {
			t.Errorf("call %d: second frame %+v (flags %#x), want bad and unreadable", calls[i].N, fr, h.raw[1].Flags)
		}
	}
}

// TestPIDNamespace runs Debian's 3.11 in its own PID namespace (unshare
// --pid --fork): its threads' IDs there are not the host's, and its
// thread states are found by their thread pointers all the same.
func TestPIDNamespace(t *testing.T) {
	const py = "/usr/bin/python3.11"
	if runtime.GOARCH != "amd64" {
		testkit.Unavailable(t, "the pythons of this test are x86-64 builds")
	}
	if _, err := os.Stat(py); err != nil {
		testkit.Unavailable(t, "no %s", py)
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		testkit.Unavailable(t, "no unshare")
	}
	r := newRig(t, "py_stack")
	script, _ := filepath.Abs(filepath.Join(testkit.Root(), "testdata", "python", "stack.py"))
	lib, _ := filepath.Abs(testkit.Fixture("libpyfix.so"))
	in, calls, hits := r.sessionIn(t, []string{unshare, "--pid", "--fork", "--mount-proc"}, py, script, lib, 0, nil)
	for i, h := range hits {
		if h.stop != python.StopEnd || len(h.raw) != len(calls[i].Frames) {
			t.Errorf("call %d: %d frames, stop %v; want %d, end", calls[i].N, len(h.raw), h.stop, len(calls[i].Frames))
			continue
		}
		for j, raw := range h.raw {
			if fr := in.Name(raw); fr.Func != calls[i].Qualnames[j] {
				t.Errorf("call %d: frame %d %+v, want %s", calls[i].N, j, fr, calls[i].Qualnames[j])
			}
		}
	}
}
