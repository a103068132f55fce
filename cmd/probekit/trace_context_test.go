package main

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/probekit/probekit/internal/test/testkit"
)

// Every --json hit carries the command name and the time the kernel
// took (CLOCK_MONOTONIC), in order, between the trace's start and end, and
// its wall-clock form as close to the hit's wall time.
func TestTraceHitContext(t *testing.T) {
	testkit.RequireKernel(t)
	requireAMD64(t)
	fx := testkit.Fixture("func_args")
	mono := func() uint64 {
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
			t.Fatal(err)
		}
		return uint64(ts.Nano())
	}
	startMono, startWall := mono(), time.Now()
	hits := traceJSON(t, "uprobe:"+fx+":sum6", "--", fx, "20")
	endMono, endWall := mono(), time.Now()
	if len(hits) != 20 {
		t.Fatalf("%d hits, want 20", len(hits))
	}
	last := startMono
	for i, h := range hits {
		if h.Comm != "func_args" {
			t.Errorf("hit %d: comm %q, want func_args", i, h.Comm)
		}
		if h.TimeNS < last || h.TimeNS > endMono {
			t.Errorf("hit %d at %d, want from %d (the one before, or the start) to %d", i, h.TimeNS, last, endMono)
		}
		last = h.TimeNS
		// The wall clock may be stepped while the test runs; a
		// tenth of a second of slack.
		if h.Time.Before(startWall.Add(-100*time.Millisecond)) || h.Time.After(endWall.Add(100*time.Millisecond)) {
			t.Errorf("hit %d at %v, want from %v to %v", i, h.Time, startWall, endWall)
		}
	}
}
