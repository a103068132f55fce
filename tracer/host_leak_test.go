package tracer_test

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/probe"
	"github.com/probekit/probekit/tracer"
)

// TestRunHostNoGoroutineLeak: 5 host-wide traces of a glob target, each
// ended by its context once started, leave the goroutine count where it
// was (issue 37: the goroutine waiting for the watch's exit, which a host
// watch never has, outlived each trace).
func TestRunHostNoGoroutineLeak(t *testing.T) {
	testkit.RequireKernel(t)
	spec, err := probe.Parse(filepath.Join(t.TempDir(), "pkleak_*") + ":sample:zero")
	if err != nil {
		t.Fatal(err)
	}
	trace := func() {
		t.Helper()
		var warn testkit.Buffer
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan error, 1)
		go func() {
			done <- tracer.Run(ctx, &tracer.Config{Probes: []probe.Spec{spec}, Output: io.Discard, Warnings: &warn})
		}()
		for deadline := time.Now().Add(20 * time.Second); !strings.Contains(warn.String(), "missing"); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("trace not started within 20 s: %s", warn.String())
			}
		}
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("Run did not end with its context")
		}
	}
	trace() // what the first trace starts once
	before := runtime.NumGoroutine()
	const n = 5
	for range n {
		trace()
	}
	// Goroutines that end after Run returns end within a second.
	got := runtime.NumGoroutine()
	for deadline := time.Now().Add(time.Second); got > before && time.Now().Before(deadline); got = runtime.NumGoroutine() {
		time.Sleep(10 * time.Millisecond)
	}
	if got > before {
		var b bytes.Buffer
		pprof.Lookup("goroutine").WriteTo(&b, 1)
		t.Fatalf("%d goroutines after %d host-wide traces, %d before:\n%s", got, n, before, b.String())
	}
}
