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
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"

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
	{"debian-3.11", "/usr/bin/python3.11", 0, python.SourceTable},
	{"3.11", "/root/.pyenv/versions/3.11.7/bin/python3.11", 0, python.SourceDWARF},
	{"3.11-table", "/root/.pyenv/versions/3.11.7/bin/python3.11", python.SourceTable, python.SourceTable},
	{"3.12", "/root/.pyenv/versions/3.12.1/bin/python3.12", 0, python.SourceDWARF},
	{"3.13", "/root/.pyenv/versions/3.13.0/bin/python3.13", 0, python.SourceDWARF},
	{"3.13-debugoffsets", "/root/.pyenv/versions/3.13.0/bin/python3.13", python.SourceDebugOffsets, python.SourceDebugOffsets},
	{"3.10", "/root/.pyenv/versions/3.10.13/bin/python3.10", 0, python.SourceDWARF},
	{"3.9", "/root/.pyenv/versions/3.9.18/bin/python3.9", 0, python.SourceDWARF},
	{"3.8", "/root/.pyenv/versions/3.8.18/bin/python3.8", 0, python.SourceDWARF},
}

type rig struct {
	tables *python.Tables
	cfi    *bpfunwind.Tables
	coll   *ebpf.Collection
	rd     *ringbuf.Reader
}

func newRig(t *testing.T) *rig {
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
	l, err := b.Entry("pyfix_hit", coll.Programs["py_stack"], nil)
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
	r := newRig(t)
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

func (r *rig) run(t *testing.T, pyPath, script, lib string, source, want python.Source) {
	cmd := exec.Command(pyPath, script, lib)
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
	defer func() {
		stdin.Close()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}()
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
	proc, err := procmaps.Open(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	in, err := python.FindWith(proc, &python.FindOptions{Source: source})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if in.Source != want {
		t.Errorf("offsets from %v, want %v", in.Source, want)
	}
	t.Logf("%s: CPython %v in %s, offsets from %v, _PyRuntime at %#x", pyPath, in.Version, in.Path, in.Source, in.Runtime)
	if len(in.EvalRanges()) == 0 {
		t.Error("no eval-loop range")
	}
	if err := r.tables.Add(proc.PID, in); err != nil {
		t.Fatal(err)
	}
	defer r.tables.Remove(proc.PID)
	if err := r.cfi.Add(proc); err != nil {
		t.Fatal(err)
	}
	defer r.cfi.Remove(proc.PID)
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
	if len(calls) != 5 {
		t.Fatalf("%d calls, want 5", len(calls))
	}
	for _, c := range calls {
		raw, stop, native := r.event(t, proc.PID, deadline)
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
