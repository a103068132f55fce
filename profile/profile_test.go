package profile

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/interp"
)

func TestMain(m *testing.M) { os.Exit(testkit.RunWithLeakCheck(m)) }

// table is a Symbolizer from a fixed address table, for the format
// tests; Processes is tested on a live process.
type table map[uint64]Location

func (tb table) Locate(pid uint32, addrs []uint64) ([]Location, error) {
	out := make([]Location, len(addrs))
	for i, a := range addrs {
		out[i] = tb[a]
	}
	return out, nil
}

var prog = &Mapping{Start: 0x400000, Limit: 0x500000, File: "/usr/bin/prog", BuildID: "abcdef0123"}

func fn(name string, line int64) Location {
	return Location{Lines: []Line{{Function: name, File: "prog.c", Line: line}}, Mapping: prog}
}

// Three paths: main>outer>emit>write 3 times, main>outer>write 2 (the
// same write), and main>other, with emit inlined into outer at
// 0x400300 (two lines at one location); one frame unknown.
var (
	sym = table{
		0x400100: fn("write", 10),
		0x400200: {Lines: []Line{{"emit", "prog.c", 20}, {"outer", "prog.c", 30}}, Mapping: prog},
		0x400210: fn("outer", 31),
		0x400400: fn("main", 40),
		0x400500: fn("other", 50),
	}
	stacks = []Stack{
		{PID: 7, Frames: []uint64{0x400100, 0x400200, 0x400400}, Count: 3, Sum: 300},
		{PID: 7, Frames: []uint64{0x400100, 0x400210, 0x400400}, Count: 2, Sum: 20},
		{PID: 7, Frames: []uint64{0x400500, 0x400400}, Count: 1, Sum: 1},
		{PID: 8, Frames: []uint64{0x400500, 0x4fffff, 0x400400}, Count: 4, Sum: 4},
	}
)

func TestFolded(t *testing.T) {
	p, err := Build(stacks, sym, nil)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := WriteFolded(&b, p); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"main;0x4fffff;other 4",
		"main;other 1",
		"main;outer;emit;write 3",
		"main;outer;write 2",
	}
	got := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(got) != len(want) {
		t.Fatalf("folded:\n%s\nwant:\n%s", b.String(), strings.Join(want, "\n"))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d: %q, want %q", i+1, got[i], want[i])
		}
	}
}

// The written file is read by go tool pprof: -top shows each function's
// flat count, -traces each path with its count and inlined frames.
func TestPprofTool(t *testing.T) {
	p, err := Build(stacks, sym, &Options{CountName: "calls", SumName: "bytes", SumUnit: "bytes"})
	if err != nil {
		t.Fatal(err)
	}
	// One mapping per process.
	if len(p.Mapping) != 2 {
		t.Errorf("%d mappings, want 2", len(p.Mapping))
	}
	for _, m := range p.Mapping {
		if m.BuildID != "abcdef0123" || m.File != "/usr/bin/prog" {
			t.Errorf("mapping %+v", m)
		}
	}
	path := filepath.Join(t.TempDir(), "prog.pprof")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Write(f); err != nil {
		t.Fatal(err)
	}
	f.Close()
	run := func(args ...string) string {
		out, err := exec.Command("go", append([]string{"tool", "pprof", "-symbolize=none", "-sample_index=calls"}, append(args, path)...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("go tool pprof %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	top := run("-top")
	for _, w := range []struct {
		fn   string
		flat int
	}{{"write", 5}, {"other", 5}} {
		if !regexp.MustCompile(`(?m)^\s+` + strconv.Itoa(w.flat) + `\s.*\s` + w.fn + `$`).MatchString(top) {
			t.Errorf("-top: no %s with flat %d:\n%s", w.fn, w.flat, top)
		}
	}
	traces := run("-traces")
	// Each trace: the count on its first line, then one function per
	// line innermost first; inlined frames marked "(inline)".
	for _, w := range []string{
		`3\s+write\n\s+emit \(inline\)\n\s+outer\n\s+main\n`,
		`2\s+write\n\s+outer\n\s+main\n`,
	} {
		if !regexp.MustCompile(w).MatchString(traces) {
			t.Errorf("-traces: no %q:\n%s", w, traces)
		}
	}
}

// A cut stack ends with a marker location of its own, outermost: the
// folded path starts with it, and the profile stays valid (the marker
// has no address and no mapping).
func TestTruncatedMarker(t *testing.T) {
	cut := []Stack{
		{PID: 7, Frames: []uint64{0x400100, 0x400210}, Count: 5, Truncated: "no unwind info for prog"},
		{PID: 7, Frames: []uint64{0x400100, 0x400210}, Count: 2},
		{PID: 8, Frames: []uint64{0x400500}, Count: 1, Truncated: "no unwind info for prog"},
	}
	p, err := Build(cut, sym, nil)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := WriteFolded(&b, p); err != nil {
		t.Fatal(err)
	}
	want := "[truncated: no unwind info for prog];other 1\n[truncated: no unwind info for prog];outer;write 5\nouter;write 2\n"
	if b.String() != want {
		t.Errorf("folded:\n%swant:\n%s", b.String(), want)
	}
	markers := 0
	for _, l := range p.Location {
		if len(l.Line) == 1 && l.Line[0].Function.Name == TruncatedName("no unwind info for prog") {
			markers++
			if l.Address != 0 || l.Mapping != nil {
				t.Errorf("marker location %+v has an address or mapping", l)
			}
		}
	}
	if markers != 1 {
		t.Errorf("%d marker locations, want 1 shared", markers)
	}
}

// A stack with interpreted frames (interp.Merge's order): Python's
// outer → middle → inner run by the eval loop, which called a C
// function, write; a bad frame and a cut marker in a second stack.
func TestInterpFrames(t *testing.T) {
	sym := table{
		0x400100: fn("write", 10),
		0x400200: fn("_PyEval_EvalFrameDefault", 20),
		0x400400: fn("main", 40),
	}
	py := []interp.Frame{
		{Func: "inner", File: "app.py", Line: 3, Runtime: "python"},
		{Func: "middle", File: "app.py", Line: 6, Runtime: "python"},
		{Func: "outer", File: "app.py", Line: 9, Runtime: "python"},
	}
	frames := []uint64{0x400100, 0x400200, 0x400400}
	parts, _ := interp.Merge(nil, frames, []interp.Raw{{Code: 1}, {Code: 2}, {Code: 3, Flags: interp.FlagRunEnd}},
		[][2]uint64{{0x4001f0, 0x400300}}, false)
	cutParts, _ := interp.Merge(nil, frames, []interp.Raw{{Code: 1}, {Code: 2}}, [][2]uint64{{0x4001f0, 0x400300}}, true)
	bad := []interp.Frame{py[0], {Runtime: "python", Unreadable: "memory unreadable"}}
	stacks := []Stack{
		{PID: 7, Frames: frames, Count: 3, Parts: parts, Interp: py},
		{PID: 7, Frames: frames, Count: 1, Parts: cutParts, Interp: bad},
	}
	p, err := Build(stacks, sym, nil)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := WriteFolded(&b, p); err != nil {
		t.Fatal(err)
	}
	want := "main;_PyEval_EvalFrameDefault;<python: more frames than the walk keeps>;<python: unreadable: memory unreadable>;inner;write 1\n" +
		"main;_PyEval_EvalFrameDefault;outer;middle;inner;write 3\n"
	if b.String() != want {
		t.Errorf("folded:\n%s\nwant:\n%s", b.String(), want)
	}
	// Each Python frame is a function with its file, at its line.
	loc := p.Sample[0].Location[1]
	if len(loc.Line) != 1 || loc.Address != 0 || loc.Mapping != nil || loc.Line[0].Function.Name != "inner" ||
		loc.Line[0].Function.Filename != "app.py" || loc.Line[0].Line != 3 {
		t.Errorf("inner's location: %+v", loc)
	}
	// The same frame of two samples is one location.
	if p.Sample[1].Location[1] != loc {
		t.Error("inner at app.py:3 is two locations")
	}
}
