package exporter

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/probekit/probekit/follow"
)

// TestWatchFailedExited: a process that exited before its attach is
// counted apart, not as an attach error (issue 21 item 12); a live one's
// failure is an error.
func TestWatchFailedExited(t *testing.T) {
	cmd := exec.Command("/bin/true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	gone := cmd.Process.Pid // reaped by Run
	x := New(Options{NoRuntimeMetrics: true})
	defer x.Close()
	m := &Metric{Name: "m"}
	failed := x.watchFailed(m)
	failed(follow.Event{Kind: follow.Failed, PID: gone, File: "/bin/x", Err: errors.New("open /proc/N/root/bin/x: no such file or directory")})
	if x.attachErrors["m"] != 0 || x.attachExited["m"] != 1 {
		t.Errorf("exited process: %d errors, %d exited; want 0 and 1", x.attachErrors["m"], x.attachExited["m"])
	}
	failed(follow.Event{Kind: follow.Failed, PID: os.Getpid(), File: "/bin/x", Err: errors.New("operation not supported")})
	if x.attachErrors["m"] != 1 || x.attachExited["m"] != 1 {
		t.Errorf("live process: %d errors, %d exited; want 1 and 1", x.attachErrors["m"], x.attachExited["m"])
	}
}

// TestExitedZombie: a zombie (exited, not yet waited for) has exited.
func TestExitedZombie(t *testing.T) {
	cmd := exec.Command("/bin/true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	pid := cmd.Process.Pid
	// Wait for the exit without reaping it.
	if err := waitExit(pid); err != nil {
		t.Fatal(err)
	}
	if !exited(pid) {
		t.Errorf("zombie pid %d not exited", pid)
	}
	if exited(os.Getpid()) {
		t.Error("the test's own process exited")
	}
}

// waitExit waits for child pid to exit, leaving it a zombie (WNOWAIT).
func waitExit(pid int) error {
	var info unix.Siginfo
	return unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
}

// TestProcessCountsBounded: the counts of processes per file keep at
// most maxProcessCounts files; past it, stale counts make room, and a
// file that finds none is counted without being kept (issue 37 item 6).
func TestProcessCountsBounded(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var c processCounts
	c.at, c.count = map[string]time.Time{}, map[string]int{}
	fresh, stale := time.Now(), time.Now().Add(-2*processCountTTL)
	for i := range maxProcessCounts {
		c.at[fmt.Sprint("/fresh/", i)], c.count[fmt.Sprint("/fresh/", i)] = fresh, 1
	}
	if n, err := c.get(self); err != nil || n < 1 {
		t.Fatalf("get(%s) = %d, %v; want at least this process", self, n, err)
	}
	if len(c.at) != maxProcessCounts || len(c.count) != maxProcessCounts {
		t.Errorf("%d and %d files kept, want %d", len(c.at), len(c.count), maxProcessCounts)
	}
	for i := range maxProcessCounts / 2 {
		c.at[fmt.Sprint("/fresh/", i)] = stale
	}
	if _, err := c.get(self); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.at[self]; !ok || len(c.at) != maxProcessCounts/2+1 {
		t.Errorf("%d files kept (this one: %v), want %d with it", len(c.at), ok, maxProcessCounts/2+1)
	}
}
