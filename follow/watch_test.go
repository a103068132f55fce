package follow

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/probekit/probekit/internal/test/testkit"
)

// waitFor polls cond until it holds, by a deadline.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
	}
}

// TestFollowDlopen: a library loaded (dlopen) after WatchProcess started
// is attached: its probe fires in the process.
func TestFollowDlopen(t *testing.T) {
	h := newHitRecorder(t)
	lib := testkit.Fixture("libusdt_lib.so")
	dir := t.TempDir()
	load, fire := filepath.Join(dir, "load"), filepath.Join(dir, "fire")
	src := "import ctypes, os, time\n" +
		"def wait(p):\n    while not os.path.exists(p):\n        time.sleep(0.005)\n" +
		"wait(" + pyQuote(load) + ")\nlib = ctypes.CDLL(" + pyQuote(lib) + ")\n" +
		"wait(" + pyQuote(fire) + ")\nfor i in range(9):\n    lib.usdt_lib_fire_libonly(i, 0)\n"
	cmd := exec.Command(python, "-c", src)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	var ev events
	w, err := WatchProcess(openProc(t, cmd.Process.Pid), []Probe{h.probe("*", "sample", "libonly", 3)}, &Options{Attacher: h.att, Notify: ev.add})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if n := w.Files(); n != 0 {
		t.Fatalf("%d files attached before the library is loaded", n)
	}
	touch(t, load)
	waitFor(t, 10*time.Second, "libusdt_lib.so attached after dlopen", func() bool { return w.Files() == 1 })
	touch(t, fire)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("python: %v", err)
	}
	waitFor(t, 10*time.Second, "the exit seen", func() bool {
		select {
		case <-w.Exited():
			return true
		default:
			return false
		}
	})
	hits := h.drain(t, 100*time.Millisecond)
	if n := hits[uint32(cmd.Process.Pid)]; n != 9 || len(hits) != 1 {
		t.Fatalf("hits by pid %v, want 9 from %d", hits, cmd.Process.Pid)
	}
	waitFor(t, 10*time.Second, "the library released at exit", func() bool { return w.Files() == 0 })
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if n := h.att.SpecsInUse(); n != 0 {
		t.Errorf("%d spec ids in use after Close", n)
	}
}

// TestFollowNewInode: a copy of a binary (another inode) first run after
// WatchHost started is attached path-wide.
func TestFollowNewInode(t *testing.T) {
	h := newHitRecorder(t)
	bin := filepath.Join(t.TempDir(), "usdt_sample_copy")
	testkit.CopyFile(t, testkit.Fixture("usdt_sample"), bin)
	w, err := WatchHost([]Probe{h.probe("usdt_sample_copy", "sample", "loop", 5)}, &Options{Attacher: h.att})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if n := w.Files(); n != 0 {
		t.Fatalf("%d files attached before the copy runs", n)
	}
	p := testkit.Start(t, bin)
	waitFor(t, 10*time.Second, "the copy attached after its exec", func() bool { return w.Files() == 1 })
	if err := p.Loop("loop", 11); err != nil {
		t.Fatal(err)
	}
	hits := h.drain(t, 100*time.Millisecond)
	if n := hits[uint32(p.PID())]; n != 11 {
		t.Fatalf("hits by pid %v, want 11 from %d", hits, p.PID())
	}
	p.Stop()
	waitFor(t, 10*time.Second, "the copy released at exit", func() bool { return w.Files() == 0 })
}

func touch(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

func pyQuote(s string) string { return "'" + s + "'" }

// TestFollowTreeDlopenMissesNothing: in a launched tree, a library loaded
// with dlopen is attached before dlopen returns (the thread is stopped at
// the dynamic linker's _dl_debug_state): calls right after it are seen.
func TestFollowTreeDlopenMissesNothing(t *testing.T) {
	h := newHitRecorder(t)
	lib := testkit.Fixture("libusdt_lib.so")
	src := "import ctypes\nlib = ctypes.CDLL(" + pyQuote(lib) + ")\nfor i in range(5):\n    lib.usdt_lib_fire_libonly(i, 0)\n"
	var ev events
	tr, err := Launch(exec.Command("/bin/sh", "-c", python+" -c \""+src+"\""), []Probe{h.probe("*", "sample", "libonly", 3)}, &Options{Attacher: h.att, Notify: ev.add})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	waitExit(t, tr, 30*time.Second)
	if err := tr.ExitErr(); err != nil {
		t.Fatalf("sh: %v", err)
	}
	hits := h.drain(t, 100*time.Millisecond)
	delete(hits, uint32(tr.PID()))
	if len(hits) != 1 {
		t.Fatalf("hits by pid %v, want 5 from python", hits)
	}
	for pid, n := range hits {
		if n != 5 {
			t.Fatalf("pid %d: %d hits, want 5", pid, n)
		}
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	if n := h.att.SpecsInUse(); n != 0 {
		t.Errorf("%d spec ids in use after Close", n)
	}
	if n, _ := ev.count(Failed); n != 0 {
		t.Errorf("failures: %v", ev.all)
	}
}

// TestFollowContainerStartedLater: a container started after WatchHost,
// with its own copy of a library (another inode, a path only its mount
// namespace has), gets the probe: path-wide on the file it maps, opened
// through its root.
func TestFollowContainerStartedLater(t *testing.T) {
	h := newHitRecorder(t)
	var mu sync.Mutex
	attachedIn := map[int]string{}
	w, err := WatchHost([]Probe{h.probe("libusdt_lib.so", "sample", "libonly", 4)}, &Options{Attacher: h.att, Notify: func(e Event) {
		if e.Kind == Attached {
			mu.Lock()
			attachedIn[e.PID] = e.File
			mu.Unlock()
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	fx, _ := testkit.StartContainer(t)
	// The container's process is unshare's child (sh execs the fixture).
	var pid int
	waitFor(t, 10*time.Second, "the container's library attached", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for p, f := range attachedIn {
			if f == "/app/libusdt_lib.so" {
				pid = p
				return true
			}
		}
		return false
	})
	fx.Fire("libonly", 4)
	hits := h.drain(t, 100*time.Millisecond)
	if hits[uint32(pid)] != 4 {
		t.Fatalf("hits by pid %v, want 4 from the container's pid %d", hits, pid)
	}
}

// TestFollowHostCgroup: with Options.Cgroup, only the processes of that
// cgroup are attached, each on its own (not path-wide).
func TestFollowHostCgroup(t *testing.T) {
	h := newHitRecorder(t)
	// A cgroup v1 pids hierarchy, or the v2 root.
	var base string
	for _, d := range []string{"/sys/fs/cgroup/pids", "/sys/fs/cgroup"} {
		if _, err := os.Stat(filepath.Join(d, "cgroup.procs")); err == nil {
			base = d
			break
		}
	}
	if base == "" {
		testkit.Unavailable(t, "no cgroup hierarchy with cgroup.procs under /sys/fs/cgroup")
	}
	name := "probekit-follow-" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	cg := filepath.Join(base, name)
	if err := os.Mkdir(cg, 0o755); err != nil {
		testkit.Unavailable(t, "make a cgroup: %v", err)
	}
	// Registered first, run last: after the fixtures' Stop empties it.
	t.Cleanup(func() {
		if err := os.Remove(cg); err != nil {
			t.Errorf("remove the cgroup: %v", err)
		}
	})

	var mu sync.Mutex
	attached := map[int]bool{}
	fx := testkit.Fixture("usdt_sample")
	w, err := WatchHost([]Probe{h.probe(filepath.Base(fx), "sample", "loop", 6)}, &Options{Attacher: h.att, Cgroup: "/" + name, Notify: func(e Event) {
		if e.Kind == Attached {
			mu.Lock()
			attached[e.PID] = true
			mu.Unlock()
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	outside := testkit.Start(t, fx)
	// The shell joins the cgroup, then execs the fixture.
	inside := testkit.Start(t, "/bin/sh", "-c", "echo $$ > "+filepath.Join(cg, "cgroup.procs")+" && exec "+fx)
	waitFor(t, 10*time.Second, "the process in the cgroup attached", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return attached[inside.PID()]
	})
	if err := inside.Loop("loop", 4); err != nil {
		t.Fatal(err)
	}
	if err := outside.Loop("loop", 5); err != nil {
		t.Fatal(err)
	}
	hits := h.drain(t, 100*time.Millisecond)
	if hits[uint32(inside.PID())] != 4 || hits[uint32(outside.PID())] != 0 {
		t.Fatalf("hits by pid %v: want 4 from %d (in the cgroup), none from %d", hits, inside.PID(), outside.PID())
	}
	mu.Lock()
	defer mu.Unlock()
	if attached[outside.PID()] {
		t.Fatalf("the process outside the cgroup was attached")
	}
}
