package main

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/probekit/probekit/internal/test/testkit"
)

// TestTraceEnding: `probekit trace PROBE -- CMD | head -1` (its output
// closed after the first line), and a SIGHUP or SIGTERM after it, end the
// trace as Ctrl-C does: probekit exits 0 within seconds, and the command
// it launched is ended (issue 36, item 5: with the output closed, probekit
// died of SIGPIPE, exit 141, and left the command running).
func TestTraceEnding(t *testing.T) {
	testkit.RequireKernel(t)
	dir := t.TempDir()
	probekit := buildProbekit(t)
	ticker := filepath.Join(dir, "pkend_ticker")
	testkit.CopyFile(t, testkit.Fixture("follow_ticker"), ticker)
	for _, how := range []string{"closed output", "SIGHUP", "SIGTERM"} {
		t.Run(how, func(t *testing.T) {
			// The command ticks for a minute unless it is ended.
			cmd := exec.Command(probekit, "trace", ticker+":follow:tick", "--", ticker, "60000")
			var errOut strings.Builder
			cmd.Stderr = &errOut
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			line, err := bufio.NewReader(out).ReadString('\n')
			if err != nil {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("first line: %v: %s", err, errOut.String())
			}
			// "PID/TID follow:tick @0x… [N]"
			pid, err := strconv.Atoi(line[:strings.IndexByte(line, '/')])
			if err != nil || !strings.Contains(line, " follow:tick @") {
				t.Fatalf("first line %q", line)
			}
			defer func() {
				// A command left running by a failure is ended here.
				if exe, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe"); exe == ticker {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			}()
			switch how {
			case "closed output":
				out.Close()
			case "SIGHUP":
				cmd.Process.Signal(syscall.SIGHUP)
			case "SIGTERM":
				cmd.Process.Signal(syscall.SIGTERM)
			}
			if how != "closed output" {
				// Its output is still read: the trace ends by the signal.
				go func() { bufio.NewReader(out).WriteTo(devNull{}) }()
			}
			waited := make(chan error, 1)
			go func() { waited <- cmd.Wait() }()
			select {
			case err := <-waited:
				if err != nil {
					t.Fatalf("probekit: %v: %s", err, errOut.String())
				}
			case <-time.After(15 * time.Second):
				t.Fatalf("probekit still running 15s after the %s: %s", how, errOut.String())
			}
			// Ended and reaped by probekit before it exited.
			if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
				syscall.Kill(pid, syscall.SIGKILL)
				t.Fatalf("the launched command (pid %d) outlived the trace: kill 0: %v", pid, err)
			}
			if how != "closed output" && errOut.Len() > 0 {
				t.Errorf("stderr: %s", errOut.String())
			}
		})
	}
}

type devNull struct{}

func (devNull) Write(b []byte) (int, error) { return len(b), nil }
