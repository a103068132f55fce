package usdt

import (
	"errors"
	"fmt"
	"os/exec"
	"runtime"
	"sync/atomic"
	"syscall"

	"github.com/probekit/probekit/procmaps"
)

// Launched is a command started stopped right after its execve, so that
// probes can be attached (filtered to its PID) before it runs a single
// instruction of its own: short-lived programs miss no probe.
type Launched struct {
	// Cmd is the running command; Wait on it after Resume.
	Cmd *exec.Cmd
	// Process is its identity, for AttachOptions.Process.
	Process *procmaps.Process

	op   chan func() error // the one request for the tracer thread
	res  chan error
	used atomic.Bool
}

// Launch starts cmd stopped after exec. The caller attaches, then calls
// Resume (or Kill) exactly once.
//
// The stop uses ptrace (PTRACE_TRACEME in the child, which stops with
// SIGTRAP at its execve). Ptrace requests must come from the thread that
// is the tracer, so Launch pins a goroutine to an OS thread for the
// command's start and resumption.
func Launch(cmd *exec.Cmd) (*Launched, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Ptrace = true
	l := &Launched{Cmd: cmd, op: make(chan func() error), res: make(chan error, 1)}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// The thread is not unlocked: it ends with the goroutine, so no
		// other goroutine inherits a tracer thread.
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		var ws syscall.WaitStatus
		pid := cmd.Process.Pid
		for {
			_, err := syscall.Wait4(pid, &ws, syscall.WALL, nil)
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			if err != nil {
				started <- fmt.Errorf("wait for %s to stop after exec: %w", cmd.Path, err)
				return
			}
			break
		}
		if !ws.Stopped() || ws.StopSignal() != syscall.SIGTRAP {
			started <- fmt.Errorf("%s did not stop after exec (status %#x)", cmd.Path, uint32(ws))
			return
		}
		started <- nil
		l.res <- (<-l.op)()
	}()
	if err := <-started; err != nil {
		if cmd.Process != nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
		return nil, fmt.Errorf("launch %s: %w", cmd.Path, err)
	}
	proc, err := procmaps.Open(cmd.Process.Pid)
	if err != nil {
		l.Kill()
		return nil, fmt.Errorf("launch %s: %w", cmd.Path, err)
	}
	l.Process = proc
	return l, nil
}

// run executes op on the tracer thread; only the first call runs.
func (l *Launched) run(op func() error) error {
	if l.used.Swap(true) {
		return errors.New("launched command was already resumed or killed")
	}
	l.op <- op
	return <-l.res
}

// Resume lets the command run (PTRACE_DETACH).
func (l *Launched) Resume() error {
	pid := l.Cmd.Process.Pid
	return l.run(func() error {
		if err := syscall.PtraceDetach(pid); err != nil {
			return fmt.Errorf("resume pid %d: %w", pid, err)
		}
		return nil
	})
}

// Kill ends a command that was never resumed and reaps it.
func (l *Launched) Kill() error {
	pid := l.Cmd.Process.Pid
	err := l.run(func() error {
		// SIGKILL ends a ptrace-stopped process; detaching is not needed.
		return syscall.Kill(pid, syscall.SIGKILL)
	})
	l.Cmd.Wait()
	return err
}
