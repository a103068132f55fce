package procmaps

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/probekit/probekit/internal/test/testkit"
)

func TestWaitExit(t *testing.T) {
	fx := testkit.Start(t, testkit.Fixture("usdt_sample"))
	p, err := Open(fx.PID())
	if err != nil {
		t.Fatal(err)
	}

	// Running: the context ends first.
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	if err := p.WaitExit(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("running process: %v, want DeadlineExceeded", err)
	}

	// Exits while waited for: noticed at once.
	done := make(chan error, 1)
	go func() { done <- p.WaitExit(context.Background()) }()
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	fx.Kill()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("exit noticed after %v", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("WaitExit did not return after the process exited")
	}

	// Already gone.
	if err := p.WaitExit(context.Background()); err != nil {
		t.Fatal(err)
	}
}
