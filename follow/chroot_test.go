package follow

import (
	"testing"
	"time"

	"github.com/probekit/probekit/internal/test/testkit"
)

// TestWatchProcessChroot: a process that chroot()ed without a mount
// namespace of its own has maps paths as the tracer sees them, outside
// its root. A per-process watch with a "*" probe attaches to its objects
// (they are opened as mapped objects, identity checked), and the hits of
// both its program and its library arrive.
func TestWatchProcessChroot(t *testing.T) {
	h := newHitRecorder(t)
	root := testkit.ContainerRoot(t)
	t.Setenv("LD_LIBRARY_PATH", "/app")
	p := testkit.Start(t, "chroot", root, "/app/usdt_lib_user")
	var ev events
	w, err := WatchProcess(openProc(t, p.PID()), []Probe{h.probe("*", "sample", "shared", 1)}, &Options{Attacher: h.att, Notify: ev.add})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if n, _ := ev.count(Failed); n != 0 {
		t.Fatalf("failures: %v", ev.all)
	}
	if n := w.Files(); n != 2 {
		t.Fatalf("%d files attached, want the program and its library: %v", n, ev.all)
	}
	p.Fire("shared", 3)
	hits := h.drain(t, 100*time.Millisecond)
	// Each round fires sample:shared in the program and in the library.
	if n := hits[uint32(p.PID())]; n != 6 {
		t.Fatalf("hits by pid %v, want 6 from %d", hits, p.PID())
	}
}
