package follow

import (
	"os/exec"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/procmaps"
)

// heapInUse is the live heap after a collection.
func heapInUse() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// churnProcesses is how many short-lived processes the churn tests run:
// 1,000, or 20 with -short (the VM matrix, where 100 took over 50 s
// under emulation on 5.10).
func churnProcesses() int {
	if testing.Short() {
		return 20
	}
	return 1000
}

// churn launches a shell that runs the fixture n times in a row, with
// sample:sema (a probe with a semaphore) wanted in every process.
func churn(t *testing.T, h *hitRecorder, n int) *Tree {
	t.Helper()
	fx := testkit.Fixture("usdt_sample")
	script := "i=0; while [ $i -lt " + strconv.Itoa(n) + " ]; do " + fx + " </dev/null >/dev/null; i=$((i+1)); done"
	tr, err := Launch(exec.Command("/bin/sh", "-c", script), []Probe{h.probe(fx, "sample", "sema", 1)}, &Options{Attacher: h.att})
	if err != nil {
		t.Fatal(err)
	}
	waitExit(t, tr, 50*time.Second)
	if err := tr.ExitErr(); err != nil {
		t.Fatalf("sh: %v", err)
	}
	return tr
}

// TestFollowChurn: 1,000 short-lived processes in a launched tree leave no
// link, spec id or descriptor behind (TestMain checks descriptors), and
// the Tree's memory does not grow with the number of processes.
func TestFollowChurn(t *testing.T) {
	h := newHitRecorder(t)
	// Warm up the caches (notes, feature probes) before measuring.
	if err := churn(t, h, 20).Close(); err != nil {
		t.Fatal(err)
	}
	before := heapInUse()
	start := time.Now()
	tr := churn(t, h, churnProcesses())
	elapsed := time.Since(start)
	if n := tr.Processes(); n != 0 {
		t.Errorf("%d processes still followed after every one exited", n)
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	if n := len(tr.tasks) + len(tr.pending); n != 0 {
		// Read after Close: the tracer has ended.
		t.Errorf("%d tasks still tracked", n)
	}
	if n := tr.Sites(); n != 0 {
		t.Errorf("%d sites attached after Close", n)
	}
	if n := h.att.SpecsInUse(); n != 0 {
		t.Errorf("%d spec ids in use after Close", n)
	}
	after := heapInUse()
	t.Logf("%d processes in %v; heap in use %d KiB before, %d KiB after", churnProcesses(), elapsed, before>>10, after>>10)
	if after > before+4<<20 {
		t.Errorf("heap in use grew from %d to %d KiB", before>>10, after>>10)
	}
}

// TestFollowSemaphore: a followed process's semaphore is raised while it
// is followed and back to 0 after Close.
func TestFollowSemaphore(t *testing.T) {
	h := newHitRecorder(t)
	fx := testkit.Fixture("usdt_sample")
	p := testkit.Start(t, fx)
	proc, err := procmaps.Open(p.PID())
	if err != nil {
		t.Fatal(err)
	}
	_, off := testkit.SymbolOffset(t, fx, "sample_sema_semaphore")
	id, err := procmaps.IDOf(fx)
	if err != nil {
		t.Fatal(err)
	}
	addr, err := proc.Address(id, off, procmaps.Write)
	if err != nil {
		t.Fatal(err)
	}
	sema := func() uint16 {
		v, err := testkit.ReadUint16(p.PID(), addr)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if v := sema(); v != 0 {
		t.Fatalf("semaphore %d before attach", v)
	}
	tr, err := Attach(openProc(t, p.PID()), []Probe{h.probe(fx, "sample", "sema", 1)}, &Options{Attacher: h.att})
	if err != nil {
		t.Fatal(err)
	}
	if v := sema(); v != 1 {
		tr.Close()
		t.Fatalf("semaphore %d while followed, want 1", v)
	}
	if hits := p.Fire("sema", 3); len(hits) != 3 || hits[0].Skipped {
		t.Errorf("fired %+v, want 3 hits not skipped", hits)
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	if v := sema(); v != 0 {
		t.Fatalf("semaphore %d after Close, want 0", v)
	}
	if got := h.drain(t, 100*time.Millisecond)[uint32(p.PID())]; got != 3 {
		t.Errorf("%d hits recorded, want 3", got)
	}
}

// TestFollowHostChurn: 1,000 short-lived processes of a selected binary
// under a host watch: the file is attached while they run and released
// after; no link, spec id or descriptor remains.
func TestFollowHostChurn(t *testing.T) {
	needPathWide(t)
	h := newHitRecorder(t)
	fx := testkit.Fixture("follow_ticker")
	var ev events
	w, err := WatchHost([]Probe{h.probe("follow_ticker", "follow", "tick", 1)}, &Options{Attacher: h.att, Notify: ev.add})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	before := heapInUse()
	// The first process lives 300 ms: long enough to be attached however
	// busy the machine is (a process that exits before the watcher opens
	// its file is not attached at all). The 1,000 after it live 0 ms.
	script := fx + " 300 >/dev/null; i=0; while [ $i -lt " + strconv.Itoa(churnProcesses()) + " ]; do " + fx + " 0 >/dev/null; i=$((i+1)); done"
	if out, err := exec.Command("/bin/sh", "-c", script).CombinedOutput(); err != nil {
		t.Fatalf("sh: %v: %s", err, out)
	}
	waitFor(t, 10*time.Second, "follow_ticker attached", func() bool { n, _ := ev.count(Attached); return n > 0 })
	waitFor(t, 10*time.Second, "the file released after its last process", func() bool { return w.Files() == 0 })
	if n, _ := ev.count(Failed); n != 0 {
		t.Errorf("%d failures: %v", n, ev.all[:min(len(ev.all), 5)])
	}
	after := heapInUse()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if n := h.att.SpecsInUse(); n != 0 {
		t.Errorf("%d spec ids in use after Close", n)
	}
	t.Logf("heap in use %d KiB before, %d KiB after; %d events lost", before>>10, after>>10, w.Lost())
	if after > before+4<<20 {
		t.Errorf("heap in use grew from %d to %d KiB", before>>10, after>>10)
	}
}
