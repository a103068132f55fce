package follow

import (
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/probekit/probekit/internal/features"
	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/usdt"
)

// startTicker runs the follow_ticker fixture for life and reaps it when
// the test ends.
func startTicker(t *testing.T, life string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(testkit.Fixture("follow_ticker"), life)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

// waitExec waits until cmd's process runs its program (exec done).
func waitExec(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	waitFor(t, 10*time.Second, "the fixture's exec", func() bool {
		exe, _ := os.Readlink("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/exe")
		return exe == cmd.Path
	})
}

// TestWatchHostMissingProbe: a mistyped probe name, given to a host watch
// while a process maps the file its target selects, is reported once as
// Missing (wrapping usdt.ErrNotFound, as usdt.Attacher.Attach does), not
// met with silence; the correct probe beside it attaches.
func TestWatchHostMissingProbe(t *testing.T) {
	h := newHitRecorder(t)
	waitExec(t, startTicker(t, "30000"))
	var ev events
	typo := h.probe("follow_ticker*", "follow", "tikc", 1)
	good := h.probe("follow_ticker*", "follow", "tick", 2)
	w, err := WatchHost([]Probe{typo, good}, &Options{Attacher: h.att, Notify: ev.add})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ev.mu.Lock()
	var missing []Event
	for _, e := range ev.all {
		if e.Kind == Missing {
			missing = append(missing, e)
		}
	}
	ev.mu.Unlock()
	if len(missing) != 1 || missing[0].Probe.Name != "tikc" || !errors.Is(missing[0].Err, usdt.ErrNotFound) ||
		!strings.Contains(missing[0].Err.Error(), "follow:tikc") {
		t.Fatalf("Missing events %v; want one for follow:tikc wrapping usdt.ErrNotFound", missing)
	}
	if n, _ := ev.count(Attached); n == 0 {
		t.Errorf("follow:tick not attached: %v", ev.all)
	}
}

// TestWatchHostProcessEvents: a host watch attaches a file once,
// path-wide, and tells each process that maps it (Joined) and that goes
// (Left), with its PID: an agent keeping per-process state can clean it.
func TestWatchHostProcessEvents(t *testing.T) {
	needPathWide(t)
	h := newHitRecorder(t)
	var ev events
	w, err := WatchHost([]Probe{h.probe("follow_ticker", "follow", "tick", 1)}, &Options{Attacher: h.att, Notify: ev.add})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	a := startTicker(t, "30000")
	waitFor(t, 10*time.Second, "the first process joined", func() bool { _, pids := ev.count(Joined); return pids[a.Process.Pid] })
	b := startTicker(t, "30000")
	waitFor(t, 10*time.Second, "the second process joined", func() bool { _, pids := ev.count(Joined); return pids[b.Process.Pid] })
	if n, _ := ev.count(Attached); n != 1 {
		t.Errorf("%d Attached events for one file; want 1 (path-wide)", n)
	}
	a.Process.Kill()
	a.Wait()
	waitFor(t, 10*time.Second, "the first process left", func() bool { _, pids := ev.count(Left); return pids[a.Process.Pid] })
	if _, pids := ev.count(Left); pids[b.Process.Pid] {
		t.Errorf("pid %d left while running", b.Process.Pid)
	}
	if n, _ := ev.count(Detached); n != 0 {
		t.Errorf("file detached while pid %d maps it", b.Process.Pid)
	}
}

// TestWatchHostNoCookie: without BPF cookies (before Linux 5.15; forced
// off on newer kernels) a position-independent file's sites are found by
// their runtime address in a process, so a host watch attaches the file
// in each process that maps it (an Attached per process, a Detached at
// its exit) instead of refusing it; both processes' hits arrive.
func TestWatchHostNoCookie(t *testing.T) {
	defer features.ForceOff(features.Cookie)()
	h := newHitRecorder(t)
	var ev events
	w, err := WatchHost([]Probe{h.probe("follow_ticker", "follow", "tick", 1)}, &Options{Attacher: h.att, Notify: ev.add})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	a := startTicker(t, "30000")
	b := startTicker(t, "30000")
	for _, c := range []*exec.Cmd{a, b} {
		waitFor(t, 10*time.Second, "pid "+strconv.Itoa(c.Process.Pid)+" attached", func() bool { _, pids := ev.count(Attached); return pids[c.Process.Pid] })
	}
	if n, _ := ev.count(Failed); n != 0 {
		t.Fatalf("failures: %v", ev.all)
	}
	seen := map[uint32]bool{}
	for deadline := time.Now().Add(10 * time.Second); !seen[uint32(a.Process.Pid)] || !seen[uint32(b.Process.Pid)]; {
		h.rd.SetDeadline(deadline)
		rec, err := h.rd.Read()
		if err != nil {
			t.Fatalf("hits of pids %v only, want %d and %d: %v", seen, a.Process.Pid, b.Process.Pid, err)
		}
		if len(rec.RawSample) >= 20 {
			seen[binary.NativeEndian.Uint32(rec.RawSample[16:])] = true
		}
	}
	a.Process.Kill()
	a.Wait()
	waitFor(t, 10*time.Second, "the first process detached", func() bool { _, pids := ev.count(Detached); return pids[a.Process.Pid] })
	if _, pids := ev.count(Detached); pids[b.Process.Pid] {
		t.Errorf("pid %d detached while running", b.Process.Pid)
	}
}
