package bpfunwind_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/probekit/probekit/bpfunwind"
	"github.com/probekit/probekit/bpfunwind/internal/cfitest"
	"github.com/probekit/probekit/internal/safeelf"
	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/procmaps"
	"github.com/probekit/probekit/symbolize"
	"github.com/probekit/probekit/unwind"
	"github.com/probekit/probekit/uprobe"
	"github.com/probekit/probekit/usdt"
	"github.com/probekit/probekit/usdt/bpf"
)

func TestMain(m *testing.M) { os.Exit(testkit.RunWithLeakCheck(m)) }

// rig is cfitest's programs progs loaded over a Tables.
type rig struct {
	tables *bpfunwind.Tables
	spec   *ebpf.CollectionSpec
	coll   *ebpf.Collection
}

func newRig(t testing.TB, progs ...string) *rig {
	t.Helper()
	testkit.RequireKernel(t)
	if runtime.GOARCH != "amd64" {
		testkit.Unavailable(t, "unwind.bpf.h walks x86-64 stacks")
	}
	tables, err := bpfunwind.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tables.Close() })
	spec, err := cfitest.LoadCfitest()
	if err != nil {
		t.Fatal(err)
	}
	if err := tables.Prepare(spec); err != nil {
		t.Fatal(err)
	}
	for name := range spec.Programs {
		if !slices.Contains(progs, name) {
			delete(spec.Programs, name)
		}
	}
	if err := usdt.Prepare(spec); err != nil {
		t.Fatal(err)
	}
	if err := uprobe.Prepare(spec, progs...); err != nil {
		t.Fatal(err)
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{MapReplacements: tables.Replacements()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { coll.Close() })
	return &rig{tables: tables, spec: spec, coll: coll}
}

// add puts process pid in the tables.
func (r *rig) add(t testing.TB, pid int) *procmaps.Process {
	t.Helper()
	proc, err := procmaps.Open(pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.tables.Add(proc); err != nil {
		t.Fatal(err)
	}
	return proc
}

// started starts fixture fx, adds it and plants prog at the entries of
// fns for it.
func (r *rig) started(t testing.TB, fx, prog string, fns ...string) *testkit.Process {
	t.Helper()
	p := testkit.Start(t, fx)
	r.add(t, p.PID())
	r.attach(t, fx, prog, p.PID(), fns...)
	return p
}

// attach plants prog at the entries of fns of fx, for process pid.
func (r *rig) attach(t testing.TB, fx, prog string, pid int, fns ...string) {
	t.Helper()
	b, err := uprobe.Open(fx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	for _, fn := range fns {
		l, err := b.Entry(fn, r.coll.Programs[prog], &uprobe.Options{PID: pid})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
	}
}

// counted reads the counts of cfi_count: each stack's function names
// joined by spaces, with its count and why its walk ended.
func (r *rig) counted(t *testing.T, pid int) map[string]bpfunwind.Counted {
	t.Helper()
	counts, err := bpfunwind.ReadCounts(r.coll.Maps["cfi_stacks"], r.coll.Maps["cfi_counts"])
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bpfunwind.Counted{}
	for _, c := range counts {
		if c.PID != uint32(pid) {
			t.Errorf("a stack of pid %d, want %d", c.PID, pid)
		}
		fns := names(t, pid, c.Stack)
		for i, fn := range fns {
			// .symtab names Go's assembly functions with their ABI.
			fns[i] = strings.TrimSuffix(fn, ".abi0")
		}
		name := strings.Join(fns, " ")
		if _, dup := out[name]; dup {
			t.Errorf("two stacks named %q (two call sites of one function)", name)
		}
		out[name] = c
	}
	return out
}

// names symbolizes s in process pid: the function of each frame.
func names(t *testing.T, pid int, s bpf.Stack) []string {
	t.Helper()
	p, err := symbolize.New(nil).Process(pid)
	if err != nil {
		t.Fatal(err)
	}
	frames, err := p.Symbolize(s.LookupAddresses())
	if err != nil {
		t.Fatal(err)
	}
	var fns []string
	for _, f := range frames {
		fns = append(fns, f.Function)
	}
	return fns
}

// libcStart is glibc 2.34+'s start of a program below main, as
// libc6-dbg names it, then the executable's _start.
const libcStart = "__libc_start_call_main __libc_start_main_impl _start"

// checkCounts compares the counted stacks with want (names joined by
// spaces, to counts); each walk must end at the outermost frame.
func checkCounts(t *testing.T, got map[string]bpfunwind.Counted, want map[string]uint64) {
	t.Helper()
	for s, n := range want {
		c, ok := got[s]
		switch {
		case !ok:
			t.Errorf("no stack %q", s)
		case c.Count != n || c.Sum != n:
			t.Errorf("stack %q: count %d, sum %d, want %d", s, c.Count, c.Sum, n)
		case c.Stop != bpfunwind.StopOutermost:
			t.Errorf("stack %q ended with %v", s, c.Stop)
		}
	}
	for s, c := range got {
		if _, ok := want[s]; !ok {
			t.Errorf("unexpected stack %q (%d hits, %v)", s, c.Count, c.Stop)
		}
	}
}

// The -fomit-frame-pointer chain main -> run -> fire -> chain_a ->
// chain_b -> chain_c -> chain_end, counted in the kernel at the entries
// of chain_end and chain_b: two stacks, every frame down to _start
// (through libc, which has no frame pointers either).
func TestCountNoFramePointers(t *testing.T) {
	r := newRig(t, "cfi_count")
	fx := testkit.Fixture("stack_chain_nofp")
	p := r.started(t, fx, "cfi_count", "chain_end", "chain_b")
	p.Fire("chain", 3)
	p.Loop("chain", 4)
	checkCounts(t, r.counted(t, p.PID()), map[string]uint64{
		"chain_end chain_c chain_b chain_a fire run main " + libcStart: 7,
		"chain_b chain_a fire run main " + libcStart:                   7,
	})
}

// Mixed code across a shared library: stack_mixed's frames keep frame
// pointers, libstack_mid.so's mid_call between them has none.
func TestCountMixed(t *testing.T) {
	r := newRig(t, "cfi_count")
	fx := testkit.Fixture("stack_mixed")
	p := r.started(t, fx, "cfi_count", "leaf")
	p.Fire("mixed", 5)
	checkCounts(t, r.counted(t, p.PID()), map[string]uint64{
		"leaf mid_call fire run main " + libcStart: 5,
	})
}

// Go writes no .eh_frame: its functions are walked by frame pointers,
// and at main.recurse's entry the first step takes the return address
// at the stack pointer. Each stack is main.recurse k times (k from 1 to
// 4), then the goroutine's function and runtime.goexit.
func TestCountGo(t *testing.T) {
	r := newRig(t, "cfi_count")
	fx := testkit.Fixture("goprog")
	p := r.started(t, fx, "cfi_count", "main.recurse")
	const goroutines, rounds, depth = 4, 3, 3
	p.Do("load 4 3 3")
	got := r.counted(t, p.PID())
	for k := 1; k <= depth+1; k++ {
		s := strings.Repeat("main.recurse ", k) + "main.run.func1 runtime.goexit"
		c, ok := got[s]
		if !ok || c.Count != goroutines*rounds || c.Stop != bpfunwind.StopOutermost {
			t.Errorf("stack %q: %d hits (%v), want %d", s, c.Count, c.Stop, goroutines*rounds)
		}
		delete(got, s)
	}
	for s, c := range got {
		t.Errorf("unexpected stack %q (%d hits, %v)", s, c.Count, c.Stop)
	}
}

// The same hits walked twice: in the kernel, and in user space by
// package unwind from a copy of the stack top taken by the same
// program. The frames are equal.
func TestSameAsUserSpace(t *testing.T) {
	r := newRig(t, "cfi_stack")
	fx := testkit.Fixture("stack_chain_nofp")
	p := testkit.Start(t, fx)
	proc := r.add(t, p.PID())
	r.attach(t, fx, "cfi_stack", p.PID(), "chain_end", "chain_a")
	p.Fire("chain", 2)
	for _, fns := range r.walkedTwice(t, proc, 4) {
		if !slices.Contains(fns, "main") {
			t.Errorf("stack %v", fns)
		}
	}
}

// walkedTwice reads n events of cfi_stack in process proc, checks that
// package unwind walks each copied stack to the frames the BPF walk
// gave, both to the outermost frame, and returns the functions of each.
func (r *rig) walkedTwice(t *testing.T, proc *procmaps.Process, n int) [][]string {
	t.Helper()
	objs, err := unwind.NewCache().Process(proc)
	if err != nil {
		t.Fatal(err)
	}
	rd, err := ringbuf.NewReader(r.coll.Maps["events"])
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var out [][]string
	deadline := time.Now().Add(5 * time.Second)
	for i := 0; i < n; i++ {
		rd.SetDeadline(deadline)
		rec, err := rd.Read()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("%d events within 5s, want %d", i, n)
		}
		if err != nil {
			t.Fatal(err)
		}
		s, stop, err := bpfunwind.DecodeStack(rec.RawSample[:bpfunwind.StackRecordSize])
		if err != nil {
			t.Fatal(err)
		}
		sample, err := bpf.DecodeStackCopy(rec.RawSample[bpfunwind.StackRecordSize:])
		if err != nil {
			t.Fatal(err)
		}
		sample.AtEntry = true
		res := sample.Unwind(objs)
		if !slices.Equal([]uint64(s), res.Frames) || stop != bpfunwind.StopOutermost || res.Stop != unwind.StopOutermost {
			t.Errorf("in BPF %#x (%v), in user space %#x (%v)", s, stop, res.Frames, res.Stop)
		}
		out = append(out, names(t, proc.PID, s))
	}
	return out
}

// Through a signal frame: a SIGUSR1 handler's callee, at its entry,
// walked through glibc's __restore_rt to the code raise interrupted and
// on to main, the same frames package unwind gives, and counted.
// __restore_rt's frame is unnamed: its return address minus 1 is the
// byte before the symbol (its FDE starts there, the symbol does not).
func TestSignalFrame(t *testing.T) {
	const sigStack = "in_handler handler  __pthread_kill_implementation __GI_raise fire run main " + libcStart
	r := newRig(t, "cfi_stack", "cfi_count")
	fx := testkit.Fixture("stack_signal")
	p := testkit.Start(t, fx)
	proc := r.add(t, p.PID())
	r.attach(t, fx, "cfi_stack", p.PID(), "in_handler")
	r.attach(t, fx, "cfi_count", p.PID(), "in_handler")
	p.Fire("signal", 2)
	for _, fns := range r.walkedTwice(t, proc, 2) {
		s := strings.Join(fns, " ")
		if s != sigStack {
			t.Errorf("stack %q", s)
		}
	}
	got := r.counted(t, p.PID())
	for s, c := range got {
		if c.Count != 2 || c.Stop != bpfunwind.StopOutermost || s != sigStack {
			t.Errorf("counted %q: %d hits (%v), want 2", s, c.Count, c.Stop)
		}
	}
	if len(got) != 1 {
		t.Errorf("%d stacks counted, want 1", len(got))
	}
}

// openELF reads the ELF file at path.
func openELF(tb testing.TB, path string) *safeelf.File {
	tb.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		testkit.Unavailable(tb, "%v", err)
	}
	f, err := safeelf.NewFile(bytes.NewReader(raw))
	if err != nil {
		tb.Fatal(err)
	}
	return f
}

// loadTable reads the CFI of the ELF file at path.
func loadTable(tb testing.TB, path string) *unwind.Table {
	tb.Helper()
	tab, err := unwind.Load(openELF(tb, path))
	if err != nil {
		tb.Fatal(err)
	}
	return tab
}

// A process not added is walked by frame pointers alone: in the
// -fomit-frame-pointer chain the walk ends before main.
func TestNotAdded(t *testing.T) {
	r := newRig(t, "cfi_count")
	fx := testkit.Fixture("stack_chain_nofp")
	p := testkit.Start(t, fx)
	r.attach(t, fx, "cfi_count", p.PID(), "chain_end")
	p.Fire("chain", 2)
	got := r.counted(t, p.PID())
	if len(got) == 0 {
		t.Fatal("no stack counted")
	}
	for s, c := range got {
		if strings.Contains(s, "main") {
			t.Errorf("stack %q (%v) without tables", s, c.Stop)
		}
	}
}

// Objects are shared between processes and freed with the last: two
// processes of one fixture, added (twice), then removed.
func TestTablesShared(t *testing.T) {
	r := newRig(t, "cfi_count")
	fx := testkit.Fixture("stack_chain_nofp")
	p1, p2 := testkit.Start(t, fx), testkit.Start(t, fx)
	r.add(t, p1.PID())
	one := r.tables.Stats()
	// The executable, libc and ld.so (the vDSO has no file).
	if one.Processes != 1 || one.Objects != 3 || one.Rows == 0 || one.RowBytes != one.Rows*bpfunwind.RowSize {
		t.Fatalf("one process: %+v", one)
	}
	r.add(t, p2.PID())
	r.add(t, p1.PID())
	if s := r.tables.Stats(); s.Processes != 2 || s.Objects != one.Objects || s.Rows != one.Rows {
		t.Fatalf("two processes: %+v, one: %+v", s, one)
	}
	if err := r.tables.Remove(p1.PID()); err != nil {
		t.Fatal(err)
	}
	if s := r.tables.Stats(); s.Processes != 1 || s.Objects != one.Objects {
		t.Fatalf("after one removal: %+v", s)
	}
	// p2 still walks whole stacks.
	r.attach(t, fx, "cfi_count", p2.PID(), "chain_end")
	p2.Fire("chain", 1)
	checkCounts(t, r.counted(t, p2.PID()), map[string]uint64{
		"chain_end chain_c chain_b chain_a fire run main " + libcStart: 1,
	})
	if err := r.tables.Remove(p2.PID()); err != nil {
		t.Fatal(err)
	}
	if s := r.tables.Stats(); s.Processes != 0 || s.Objects != 0 || s.Rows != 0 {
		t.Fatalf("after both: %+v", s)
	}
	// Freed rows are used again: the same objects fit where they were.
	r.add(t, p1.PID())
	if s := r.tables.Stats(); s.Objects != one.Objects || s.Rows != one.Rows {
		t.Fatalf("again: %+v", s)
	}
}

// pipes connects cmd's stdin, and its stdout line by line.
func pipes(t *testing.T, cmd *exec.Cmd) (io.WriteCloser, *bufio.Scanner) {
	t.Helper()
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	return in, bufio.NewScanner(out)
}

// pythonScript waits for a line on stdin (the test attaches meanwhile),
// then calls outer once and inner 5 times (the profile hook makes
// CPython 3.11 fire function__entry), then waits for another line (the
// test names the stacks meanwhile).
const pythonScript = `import sys
print("ready", flush=True)
sys.stdin.readline()
sys.setprofile(lambda *a: None)
def inner(x):
    return x * 2
def outer():
    for i in range(5):
        inner(i)
outer()
print("done", flush=True)
sys.stdin.readline()
`

// python3.11 (built without frame pointers) at function__entry: every
// stack goes through the interpreter's C frames down to Py_BytesMain and
// libc's start. Debian's python3.11 has no .symtab, so its local
// functions are unnamed here; main is not on the stack: its one
// instruction is a jmp to Py_BytesMain.
func TestCountPython(t *testing.T) {
	const python = "/usr/bin/python3.11"
	if _, err := os.Stat(python); err != nil {
		testkit.Unavailable(t, "%v", err)
	}
	r := newRig(t, "cfi_count_usdt")
	script := filepath.Join(t.TempDir(), "calls.py")
	if err := os.WriteFile(script, []byte(pythonScript), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python, script)
	in, lines := pipes(t, cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	if !lines.Scan() || lines.Text() != "ready" {
		t.Fatalf("python: %q, %v", lines.Text(), lines.Err())
	}
	pid := cmd.Process.Pid
	r.add(t, pid)
	att, err := usdt.NewAttacher(r.spec, r.coll)
	if err != nil {
		t.Fatal(err)
	}
	l, err := att.Attach(r.coll.Programs["cfi_count_usdt"], python, "python", "function__entry", &usdt.Options{PID: pid})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	io.WriteString(in, "go\n")
	if !lines.Scan() || lines.Text() != "done" {
		t.Fatalf("python: %q, %v", lines.Text(), lines.Err())
	}
	// CPython 3.11 runs Python-to-Python calls in one C frame of its
	// evaluation loop: outer's and inner's entries share a C stack.
	// Unnamed: the site's function and its caller (the loop and
	// _PyEval_Vector, local), and pyrun_file, run_mod and
	// run_eval_code_obj (static functions of pythonrun.c).
	checkCounts(t, r.counted(t, pid), map[string]uint64{
		"  PyEval_EvalCode    _PyRun_SimpleFileObject _PyRun_AnyFileObject Py_RunMain Py_BytesMain " + libcStart: 6,
	})
}

// A command launched stopped at its exec (procmaps.Launch) has mapped
// only itself and ld.so when Watch adds it. Watch adds it again at its
// program's entry point (procmaps.LaunchEntry), once ld.so has mapped
// its shared libraries: libstack_mid.so's mid_call, which keeps no frame
// pointer, is walked by its CFI from the first hit on (by frame pointers
// it would break the stack), and a later Add changes nothing.
func TestLaunchedEntry(t *testing.T) {
	r := newRig(t, "cfi_count")
	fx := testkit.Fixture("stack_mixed")
	cmd := exec.Command(fx)
	in, lines := pipes(t, cmd)
	l, err := procmaps.Launch(cmd)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.tables.Watch(l); err != nil {
		l.Finish(err)
		t.Fatal(err)
	}
	pid := l.Process.PID
	if s := r.tables.Stats(); s.Objects != 2 {
		l.Finish(nil)
		t.Errorf("at the exec stop: %+v, want the executable and ld.so", s)
	}
	b, err := uprobe.Open(fx)
	if err != nil {
		l.Finish(err)
		t.Fatal(err)
	}
	defer b.Close()
	link, err := b.Entry("leaf", r.coll.Programs["cfi_count"], &uprobe.Options{PID: pid})
	if err != nil {
		l.Finish(err)
		t.Fatal(err)
	}
	defer link.Close()
	if err := l.Finish(nil); err != nil {
		t.Fatal(err)
	}
	defer l.Wait()
	defer in.Close()
	fire := func(n int) {
		t.Helper()
		fmt.Fprintf(in, "loop mixed %d\n", n)
		for lines.Scan() && lines.Text() != "done" {
		}
	}
	if !lines.Scan() || !strings.HasPrefix(lines.Text(), "ready") {
		t.Fatalf("stack_mixed: %q", lines.Text())
	}
	fire(2)
	whole := "leaf mid_call fire run main " + libcStart
	if got := r.counted(t, pid); len(got) != 1 || got[whole].Count != 2 {
		t.Errorf("stacks after the entry point: %v, want %q twice", got, whole)
	}
	r.add(t, pid)
	fire(3)
	if got := r.counted(t, pid); len(got) != 1 || got[whole].Count != 5 {
		t.Errorf("stacks after Add: %v, want %q 5 times", got, whole)
	}
}

// Refresh adds the processes again: stack_dlopen's libstack_mid.so,
// loaded after the Add, is walked by frame pointers until then (mid_call
// keeps none: the stack breaks), by its CFI after. A process that has
// exited is removed, its tables freed.
func TestRefresh(t *testing.T) {
	r := newRig(t, "cfi_count")
	fx := testkit.Fixture("stack_dlopen")
	p := r.started(t, fx, "cfi_count", "leaf")
	other := testkit.Start(t, fx)
	r.add(t, other.PID())
	p.Loop("dl", 2)
	whole := "leaf mid_call fire run main " + libcStart
	if got := r.counted(t, p.PID()); len(got) == 0 || got[whole].Count != 0 {
		t.Errorf("stacks before Refresh: %v, want none whole", got)
	}
	if err := r.tables.Refresh(); err != nil {
		t.Fatal(err)
	}
	p.Loop("dl", 3)
	if c := r.counted(t, p.PID())[whole]; c.Count != 3 {
		t.Errorf("stack %q after Refresh: %d hits, want 3", whole, c.Count)
	}
	// The executable, libstack_mid.so, libc and ld.so.
	if s := r.tables.Stats(); s.Processes != 2 || s.Objects != 4 {
		t.Errorf("after Refresh: %+v, want 2 processes, 4 objects", s)
	}
	p.Stop()
	other.Stop()
	if err := r.tables.Refresh(); err != nil {
		t.Fatal(err)
	}
	if s := r.tables.Stats(); s.Processes != 0 || s.Objects != 0 || s.Rows != 0 {
		t.Errorf("after the processes exited: %+v, want nothing", s)
	}
}
