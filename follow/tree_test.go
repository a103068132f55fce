package follow

import (
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/probekit/probekit/internal/features"
	"github.com/probekit/probekit/internal/test/bpftest"
	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/usdt"
)

// python is the interpreter whose USDT probes the tests use (Debian's
// CPython 3.11, built with --with-dtrace).
const python = "/usr/bin/python3.11"

// hitRecorder loads bpftest's args_reader (cookie, then IP, then tgid
// at offset 16 of each record) and an Attacher for it.
type hitRecorder struct {
	coll *ebpf.Collection
	att  *usdt.Attacher
	rd   *ringbuf.Reader
}

func newHitRecorder(t testing.TB) *hitRecorder {
	t.Helper()
	testkit.RequireKernel(t)
	if _, err := os.Stat(python); err != nil {
		testkit.Unavailable(t, "%s: %v", python, err)
	}
	spec, err := bpftest.LoadArgs()
	if err != nil {
		t.Fatal(err)
	}
	if err := usdt.Prepare(spec); err != nil {
		t.Fatal(err)
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		t.Fatal(err)
	}
	att, err := usdt.NewAttacher(spec, coll)
	if err != nil {
		coll.Close()
		t.Fatal(err)
	}
	rd, err := ringbuf.NewReader(coll.Maps["hits"])
	if err != nil {
		coll.Close()
		t.Fatal(err)
	}
	h := &hitRecorder{coll: coll, att: att, rd: rd}
	t.Cleanup(func() {
		rd.Close()
		coll.Close()
	})
	return h
}

func (h *hitRecorder) probe(target, provider, name string, cookie uint64) Probe {
	return Probe{Target: target, Provider: provider, Name: name, Program: h.coll.Programs["args_reader"], Cookie: cookie}
}

// drain reads the hits recorded so far (until the ring stays empty for
// quiet) and counts them by PID.
func (h *hitRecorder) drain(t testing.TB, quiet time.Duration) map[uint32]int {
	t.Helper()
	byPID := map[uint32]int{}
	for {
		h.rd.SetDeadline(time.Now().Add(quiet))
		rec, err := h.rd.Read()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return byPID
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(rec.RawSample) < 20 {
			t.Fatalf("short record: %d bytes", len(rec.RawSample))
		}
		byPID[binary.NativeEndian.Uint32(rec.RawSample[16:])]++
	}
}

// events collects a Tree's notifications.
type events struct {
	mu  sync.Mutex
	all []Event
}

func (e *events) add(ev Event) {
	e.mu.Lock()
	e.all = append(e.all, ev)
	e.mu.Unlock()
}

func (e *events) count(kind EventKind) (n int, pids map[int]bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	pids = map[int]bool{}
	for _, ev := range e.all {
		if ev.Kind == kind {
			n++
			pids[ev.PID] = true
		}
	}
	return n, pids
}

// waitExit waits for the root of tr to exit, by a deadline.
func waitExit(t *testing.T, tr *Tree, d time.Duration) {
	t.Helper()
	select {
	case <-tr.Exited():
	case <-time.After(d):
		t.Fatalf("the root process did not exit within %v", d)
	}
}

// calls is a Python script that calls f n times with a profiler set
// (CPython 3.11 fires function__entry only then).
func script(t *testing.T, name, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	src := "import sys, os\nsys.setprofile(lambda *a: None)\ndef f():\n    pass\n" + body
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestLaunchShellTwoPythons: a shell launching python twice; every call of
// both is seen, from two PIDs other than the shell's.
func TestFollowLaunchShellTwoPythons(t *testing.T) {
	// Without cookies (before 5.15) the shell, which never maps python,
	// gets no attachment (TestFollowLaunchShellTwoPythonsNoCookie).
	want := 3
	if ok, err := features.Have(features.Cookie); err != nil {
		t.Fatal(err)
	} else if !ok {
		want = 2
	}
	followShellTwoPythons(t, want)
}

// needPathWide skips t before Linux 5.15, for the tests of a host
// watch's path-wide attachment (one per file, Joined and Left per
// process): without BPF cookies a position-independent file's sites are
// found by their runtime address in a process, so a host watch attaches
// per process there instead (TestWatchHostNoCookie).
func needPathWide(t *testing.T) {
	t.Helper()
	ok, err := features.Have(features.Cookie)
	testkit.NeedFeature(t, ok, err, features.Cookie.Since(), "a host watch's path-wide attachment to a position-independent file needs "+features.Cookie.String())
}

// TestFollowLaunchShellTwoPythonsNoCookie: the same without BPF cookies
// (before Linux 5.15; forced off on newer kernels), where a site is found
// by its runtime address. Each python is the shell's child, adopted at
// its fork while it still runs the shell, whose image does not map
// python: its sites are attached at its execve, in the new image. The
// shell itself never maps python, so it gets no attachment.
func TestFollowLaunchShellTwoPythonsNoCookie(t *testing.T) {
	defer features.ForceOff(features.Cookie)()
	followShellTwoPythons(t, 2)
}

// followShellTwoPythons runs the test; wantAttached is how many
// processes get the probe attached.
func followShellTwoPythons(t *testing.T, wantAttached int) {
	t.Helper()
	h := newHitRecorder(t)
	const calls = 200
	a := script(t, "a.py", "for _ in range(200):\n    f()\n")
	b := script(t, "b.py", "for _ in range(200):\n    f()\n")
	var ev events
	cmd := exec.Command("/bin/sh", "-c", python+" "+a+"; "+python+" "+b)
	tr, err := Launch(cmd, []Probe{h.probe(python, "python", "function__entry", 7)}, &Options{Attacher: h.att, Notify: ev.add})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	waitExit(t, tr, 30*time.Second)
	if err := tr.ExitErr(); err != nil {
		t.Fatalf("sh: %v", err)
	}
	hits := h.drain(t, 200*time.Millisecond)
	delete(hits, uint32(tr.PID()))
	if len(hits) != 2 {
		t.Fatalf("hits from %d python processes, want 2: %v", len(hits), hits)
	}
	for pid, n := range hits {
		if n < calls {
			t.Errorf("pid %d: %d hits, want at least %d (one per call of f)", pid, n, calls)
		}
	}
	if n, pids := ev.count(Attached); n < wantAttached || len(pids) < wantAttached {
		t.Errorf("%d attach events for %d processes, want %d processes", n, len(pids), wantAttached)
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	if n := tr.Sites(); n != 0 {
		t.Errorf("%d sites still attached after Close", n)
	}
	if n := h.att.SpecsInUse(); n != 0 {
		t.Errorf("%d spec ids still in use after Close", n)
	}
	if n, _ := ev.count(Failed); n != 0 {
		t.Errorf("%d failures: %v", n, ev.all)
	}
}

// TestFollowForkWithoutExec: a Python child made by os.fork() runs the
// same image; its calls are seen.
func TestFollowForkWithoutExec(t *testing.T) {
	h := newHitRecorder(t)
	s := script(t, "fork.py", "pid = os.fork()\nif pid == 0:\n    for _ in range(150):\n        f()\n    os._exit(0)\nos.waitpid(pid, 0)\n")
	tr, err := Launch(exec.Command(python, s), []Probe{h.probe(python, "python", "function__entry", 1)}, &Options{Attacher: h.att})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	waitExit(t, tr, 30*time.Second)
	if err := tr.ExitErr(); err != nil {
		t.Fatalf("python: %v", err)
	}
	hits := h.drain(t, 200*time.Millisecond)
	delete(hits, uint32(tr.PID()))
	if len(hits) != 1 {
		t.Fatalf("hits from %d child processes, want 1: %v", len(hits), hits)
	}
	for pid, n := range hits {
		if n < 150 {
			t.Errorf("child %d: %d hits, want at least 150", pid, n)
		}
	}
}
