package semaphore

import (
	"errors"
	"testing"

	"github.com/probekit/probekit/procmaps"
)

// TestValue: Value reads what is in the target's memory, whoever wrote
// it, and fails once the process is gone.
func TestValue(t *testing.T) {
	fx, proc, addr := fixtureSemaphore(t)
	for _, want := range []uint16{0, 3, 0xffff, 1} {
		setCounter(t, fx.PID(), addr, want)
		if v, err := Value(proc, addr); err != nil || v != want {
			t.Fatalf("Value = %d, %v; want %d", v, err, want)
		}
	}
	fx.Stop()
	if _, err := Value(proc, addr); !errors.Is(err, procmaps.ErrProcessGone) {
		t.Fatalf("after exit: %v, want ErrProcessGone", err)
	}
}
