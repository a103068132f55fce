package record_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/probekit/probekit/bpfunwind"
	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/interp/python"
	"github.com/probekit/probekit/procmaps"
	"github.com/probekit/probekit/record"
)

// benchScript calls pyfix_hit N times from outer -> middle -> inner for
// each line N it reads (the GIL held: ctypes.PyDLL), then prints "ok".
const benchScript = `import ctypes, sys
lib = ctypes.PyDLL(sys.argv[1])
def inner(n):
    for _ in range(n):
        lib.pyfix_hit(1)
def middle(n):
    inner(n)
def outer(n):
    middle(n)
print("ready", flush=True)
for line in sys.stdin:
    outer(int(line))
    print("ok", flush=True)
`

// BenchmarkStackPython is the BPF run time of one printed --stack hit
// (prog-ns/hit, BPF_STATS_RUN_TIME: Linux 5.8) at a fixture function
// that Debian's CPython 3.11 calls through ctypes from outer -> middle
// -> inner: native walks the CFI stack alone (no interpreter map),
// python walks it and the thread's Python frames (the walk program,
// then the trace program it tail-calls). The same process, the same
// native stack, in one run; python's x-native is the ratio. Run:
//
//	go test -run '^$' -bench BenchmarkStackPython -benchtime 20000x ./record/
func BenchmarkStackPython(b *testing.B) {
	testkit.RequireKernel(b)
	if runtime.GOARCH != "amd64" {
		testkit.Unavailable(b, "the CFI walk is x86-64's")
	}
	const pyPath = "/usr/bin/python3.11"
	if _, err := os.Stat(pyPath); err != nil {
		testkit.Unavailable(b, "no %s", pyPath)
	}
	stats, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
	if err != nil {
		testkit.Unavailable(b, "BPF statistics: %v", err)
	}
	defer stats.Close()
	lib, err := filepath.Abs(testkit.Fixture("libpyfix.so"))
	if err != nil {
		b.Fatal(err)
	}
	script := filepath.Join(b.TempDir(), "bench.py")
	if err := os.WriteFile(script, []byte(benchScript), 0o644); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(pyPath, script, lib)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		stdin.Close()
		cmd.Wait()
	}()
	lines := bufio.NewScanner(stdout)
	expect := func(want string) {
		if !lines.Scan() || lines.Text() != want {
			b.Fatalf("script: %q (%v), want %q", lines.Text(), lines.Err(), want)
		}
	}
	expect("ready")
	proc, err := procmaps.Open(cmd.Process.Pid)
	if err != nil {
		b.Fatal(err)
	}
	cfi, err := bpfunwind.New(nil)
	if err != nil {
		b.Fatal(err)
	}
	defer cfi.Close()
	if err := cfi.Add(proc); err != nil {
		b.Fatal(err)
	}
	py, err := python.NewTables(nil)
	if err != nil {
		b.Fatal(err)
	}
	defer py.Close()
	in, err := python.Find(proc)
	if err != nil {
		b.Fatal(err)
	}
	defer in.Close()
	if err := py.Add(proc.PID, in); err != nil {
		b.Fatal(err)
	}
	// Warm: ctypes' first call loads and resolves what it needs.
	fmt.Fprintln(stdin, 10)
	expect("ok")
	var native float64
	for _, mode := range []string{"native", "python"} {
		b.Run(mode, func(b *testing.B) {
			spec, err := record.Spec()
			if err != nil {
				b.Fatal(err)
			}
			if err := spec.Variables[record.CookieFlagName].Set(true); err != nil {
				b.Fatal(err)
			}
			if err := record.SetStackCFI(spec); err != nil {
				b.Fatal(err)
			}
			if err := cfi.Prepare(spec); err != nil {
				b.Fatal(err)
			}
			repl := cfi.Replacements()
			if mode == "python" {
				if err := py.Prepare(spec); err != nil {
					b.Fatal(err)
				}
				for k, v := range py.Replacements() {
					repl[k] = v
				}
			}
			objs, err := record.LoadSpecOptions(spec, record.FuncProgram, &ebpf.CollectionOptions{MapReplacements: repl})
			if err != nil {
				b.Fatal(err)
			}
			defer objs.Close()
			cookie, err := record.FuncCookie(0, record.RegsC, record.KindUprobe, 0)
			if err != nil {
				b.Fatal(err)
			}
			ex, err := link.OpenExecutable(lib)
			if err != nil {
				b.Fatal(err)
			}
			l, err := ex.Uprobe("pyfix_hit", objs.FuncProgram, &link.UprobeOptions{Cookie: cookie, PID: proc.PID})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			rd, err := ringbuf.NewReader(objs.Events)
			if err != nil {
				b.Fatal(err)
			}
			// The records are read (and their frames counted) as they
			// come, so that the ring never fills.
			type seen struct{ hits, native, interp int }
			done := make(chan seen, 1)
			go func() {
				var s seen
				var ev record.Event
				for {
					rec, err := rd.Read()
					if err != nil {
						done <- s
						return
					}
					if ev.Decode(rec.RawSample) == nil {
						s.hits++
						s.native += ev.NFrames
						s.interp += ev.NInterp
					}
				}
			}()
			before, err := objs.FuncProgram.Stats()
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			fmt.Fprintln(stdin, b.N)
			expect("ok")
			b.StopTimer()
			after, err := objs.FuncProgram.Stats()
			if err != nil {
				b.Fatal(err)
			}
			rd.Close()
			s := <-done
			if n := after.RunCount - before.RunCount; n != uint64(b.N) {
				b.Fatalf("%d runs, want %d", n, b.N)
			}
			ns := float64(after.Runtime-before.Runtime) / float64(b.N)
			b.ReportMetric(ns, "prog-ns/hit")
			if s.hits > 0 {
				b.ReportMetric(float64(s.native)/float64(s.hits), "frames/hit")
				b.ReportMetric(float64(s.interp)/float64(s.hits), "py-frames/hit")
			}
			if mode == "python" && s.interp == 0 || mode == "native" && s.interp != 0 {
				b.Fatalf("%s: %d Python frames in %d records", mode, s.interp, s.hits)
			}
			if mode == "native" {
				native = ns
			} else if native > 0 {
				b.ReportMetric(ns/native, "x-native")
			}
		})
	}
}
