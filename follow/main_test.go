package follow

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/procmaps"
)

func TestMain(m *testing.M) { os.Exit(testkit.RunWithLeakCheck(m)) }

// openProc opens the identity of process pid.
func openProc(t *testing.T, pid int) *procmaps.Process {
	t.Helper()
	p, err := procmaps.Open(pid)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A process identity whose PID another process has now (its start time
// differs) is refused by Attach and WatchProcess, and nothing stays
// attached or traced.
func TestFollowStaleProcess(t *testing.T) {
	h := newHitRecorder(t)
	fx := testkit.Fixture("usdt_sample")
	p := testkit.Start(t, fx)
	stale := *openProc(t, p.PID())
	stale.StartTime++
	probes := []Probe{h.probe(fx, "sample", "loop", 1)}
	if tr, err := Attach(&stale, probes, &Options{Attacher: h.att}); !errors.Is(err, procmaps.ErrProcessChanged) {
		if tr != nil {
			tr.Close()
		}
		t.Errorf("Attach of a stale identity: %v, want ErrProcessChanged", err)
	}
	if w, err := WatchProcess(&stale, []Probe{h.probe("*", "sample", "loop", 1)}, &Options{Attacher: h.att}); !errors.Is(err, procmaps.ErrProcessChanged) {
		if w != nil {
			w.Close()
		}
		t.Errorf("WatchProcess of a stale identity: %v, want ErrProcessChanged", err)
	}
	// Still running, untraced: the fixture fires, and no probe sees it.
	p.Fire("loop", 1)
	if hits := h.drain(t, 200*time.Millisecond); len(hits) != 0 {
		t.Errorf("hits after the refusals: %v", hits)
	}
	st, err := os.ReadFile("/proc/" + strconv.Itoa(p.PID()) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(st), "TracerPid:\t0\n") {
		t.Errorf("the process is still traced:\n%s", st)
	}
}
