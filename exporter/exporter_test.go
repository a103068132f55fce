package exporter

import (
	"errors"
	"os"
	"os/exec"
	"testing"

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
