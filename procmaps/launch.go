package procmaps

import (
	"errors"
	"fmt"
	"os/exec"
	"runtime"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Launched is a command started stopped right after its execve, so that
// probes can be attached (filtered to its PID) before it runs a single
// instruction of its own: short-lived programs miss no probe.
type Launched struct {
	// Cmd is the command; Wait on it once Finish let it run.
	Cmd *exec.Cmd
	// Process is its identity, for attach options.
	Process *Process

	op       chan func() error // the one request for the tracer thread
	res      chan error
	finished atomic.Bool
	// hooks are Watch's; held is closed once the tracer thread let the
	// command go for good (at its exit, or at Finish without hooks).
	hooks []func(LaunchEvent)
	held  chan struct{}
	// traced is set by the tracer thread when Finish resumed the
	// command still traced (hooks).
	traced bool
	// entry is the breakpoint of LaunchEntry, on the tracer thread.
	entry EntryStop
}

// LaunchEvent is what a Watch hook is called for.
type LaunchEvent uint8

const (
	// LaunchExec: the command has just run execve again (a new image).
	LaunchExec LaunchEvent = iota + 1
	// LaunchExit: the command is exiting; its memory and maps are still
	// there.
	LaunchExit
	// LaunchEntry: the command is at its program's entry point (the
	// auxiliary vector's AT_ENTRY), after its start or an exec: the
	// dynamic linker has mapped the libraries the program was linked
	// with and run their initializers, and no instruction of the
	// program's own has run. Only on x86-64 (elsewhere it does not come).
	LaunchEntry
)

// Launch starts cmd stopped after exec. Whatever happens next, the caller
// ends the stop with one helper, Finish, which lets the command run or
// kills it:
//
//	l, err := procmaps.Launch(cmd)
//	if err != nil {
//		return err
//	}
//	defer func() { err = l.Finish(err) }() // kills it on every error return
//	... attach, with l.Process ...
//	if err := l.Finish(nil); err != nil { // lets it run
//		return err
//	}
//	... cmd.Wait() ...
//
// The command never runs untraced: if the tracer dies before Finish, the
// kernel kills it (PTRACE_O_EXITKILL, Linux 3.8).
//
// The stop uses ptrace (PTRACE_TRACEME in the child, which stops with
// SIGTRAP at its execve). Ptrace requests must come from the thread that
// is the tracer, so Launch pins a goroutine to an OS thread for the
// command's start and its end of the stop.
func Launch(cmd *exec.Cmd) (*Launched, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Ptrace = true
	l := &Launched{Cmd: cmd, op: make(chan func() error), res: make(chan error, 1), held: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// The thread is not unlocked: it ends with the goroutine, so no
		// other goroutine inherits a tracer thread.
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		if err := stopAtExec(cmd.Process.Pid); err != nil {
			started <- fmt.Errorf("%s: %w", cmd.Path, err)
			return
		}
		started <- nil
		l.res <- (<-l.op)()
		if l.traced {
			l.hold(cmd.Process.Pid)
		}
		close(l.held)
	}()
	if err := <-started; err != nil {
		if cmd.Process != nil {
			// Killed with the tracer thread, and reaped here.
			cmd.Process.Kill()
			cmd.Wait()
		}
		return nil, fmt.Errorf("launch %s: %w", cmd.Path, err)
	}
	proc, err := Open(cmd.Process.Pid)
	if err != nil {
		return nil, l.Finish(fmt.Errorf("launch %s: %w", cmd.Path, err))
	}
	l.Process = proc
	return l, nil
}

// stopAtExec waits, on the tracer thread, for the child's stop at its
// execve, and ties the child's life to the tracer's until it is resumed.
func stopAtExec(pid int) error {
	if err := WaitExecStop(pid); err != nil {
		return err
	}
	// Until PTRACE_DETACH clears it, the kernel sends SIGKILL to the
	// child when the tracer exits, however it exits.
	if err := unix.PtraceSetOptions(pid, unix.PTRACE_O_EXITKILL); err != nil {
		return fmt.Errorf("PTRACE_SETOPTIONS(PTRACE_O_EXITKILL): %w", err)
	}
	return nil
}

// WaitExecStop waits for pid, a child started with PTRACE_TRACEME
// (exec.Cmd's SysProcAttr.Ptrace), to stop with SIGTRAP after its execve,
// and fails when it ended or stopped otherwise.
func WaitExecStop(pid int) error {
	var ws syscall.WaitStatus
	for {
		_, err := syscall.Wait4(pid, &ws, syscall.WALL, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("wait for the stop after exec: %w", err)
		}
		break
	}
	if !ws.Stopped() || ws.StopSignal() != syscall.SIGTRAP {
		return fmt.Errorf("did not stop after exec (status %#x)", uint32(ws))
	}
	return nil
}

// Finish ends the stop. With err nil it lets the command run
// (PTRACE_DETACH) and returns nil, or, when the command cannot be
// resumed, kills it and says why. With an error it kills the command,
// reaps it and returns err. Only the first call acts; later ones return
// err as given, so a deferred Finish of the caller's error result covers
// every return before the command was resumed and changes nothing after.
func (l *Launched) Finish(err error) error {
	if l.finished.Swap(true) {
		return err
	}
	pid := l.Cmd.Process.Pid
	if err == nil {
		l.op <- func() error {
			if len(l.hooks) > 0 {
				// Traced on, stopped only at its execs and its exit
				// (hold); EXITKILL stays until the detach at its exit.
				opts := unix.PTRACE_O_EXITKILL | unix.PTRACE_O_TRACEEXIT | unix.PTRACE_O_TRACEEXEC
				if err := unix.PtraceSetOptions(pid, opts); err != nil {
					return fmt.Errorf("resume pid %d: PTRACE_SETOPTIONS: %w", pid, err)
				}
				l.entry.Arm(pid)
				if err := syscall.PtraceCont(pid, 0); err != nil {
					return fmt.Errorf("resume pid %d: %w", pid, err)
				}
				l.traced = true
				return nil
			}
			if err := syscall.PtraceDetach(pid); err != nil {
				return fmt.Errorf("resume pid %d: %w", pid, err)
			}
			return nil
		}
		if err = <-l.res; err == nil {
			return nil
		}
		// Not resumed (the tracer thread has ended): it must not stay
		// stopped.
		syscall.Kill(pid, syscall.SIGKILL)
		l.Cmd.Wait()
		return err
	}
	// SIGKILL ends a ptrace-stopped process; detaching is not needed.
	l.op <- func() error { return syscall.Kill(pid, syscall.SIGKILL) }
	<-l.res
	l.Cmd.Wait()
	return err
}

// Watch calls hook, on the tracer thread while the command is stopped,
// at each execve it makes after Finish lets it run, at its program's
// entry point (LaunchEntry) and at its exit, before the kernel releases
// its memory: a symbolizer reads its maps and files there, so that
// stacks read after the command ended are named.
// Call it before Finish. With a hook the command stays traced until its
// exit: the caller waits for it with Wait, not Cmd.Wait. A stop costs
// the command the hook's time; its signals are delivered as they come
// (a job-control stop is resumed at once). The command's threads other
// than its first are not stopped, and a SIGKILL ends it without a stop.
func (l *Launched) Watch(hook func(LaunchEvent)) {
	l.hooks = append(l.hooks, hook)
}

// Wait waits for the command to exit (Cmd.Wait) once the tracer thread
// has let it go: after Finish(nil), instead of Cmd.Wait when Watch was
// called.
func (l *Launched) Wait() error {
	<-l.held
	return l.Cmd.Wait()
}

// hold runs on the tracer thread after Finish resumed the command with
// hooks: it forwards the command's signals, calls the hooks at its
// execs and at its exit stop, then detaches. The command's exit status is
// never reaped here (waitid with WNOWAIT looks first), so Cmd.Wait gets
// it.
func (l *Launched) hold(pid int) {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WSTOPPED|unix.WNOWAIT|unix.WALL, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || info.Code == cldExited || info.Code == cldKilled || info.Code == cldDumped {
			return // gone without a stop (SIGKILL): Cmd.Wait reaps it
		}
		var ws syscall.WaitStatus
		if _, err := syscall.Wait4(pid, &ws, syscall.WALL, nil); err != nil {
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			return
		}
		if !ws.Stopped() {
			return
		}
		sig := ws.StopSignal()
		switch {
		case sig == syscall.SIGTRAP && ws.TrapCause() == unix.PTRACE_EVENT_EXIT:
			for _, h := range l.hooks {
				h(LaunchExit)
			}
			syscall.PtraceDetach(pid)
			return
		case sig == syscall.SIGTRAP && ws.TrapCause() == unix.PTRACE_EVENT_EXEC:
			for _, h := range l.hooks {
				h(LaunchExec)
			}
			// A new image: its own entry point.
			l.entry.Arm(pid)
			sig = 0
		case sig == syscall.SIGTRAP && l.entry.Hit(pid):
			for _, h := range l.hooks {
				h(LaunchEntry)
			}
			sig = 0
		case isGroupStop(pid, sig):
			sig = 0
		}
		if err := syscall.PtraceCont(pid, int(sig)); err != nil {
			return
		}
	}
}

// si_code values of a child's SIGCHLD (include/uapi/asm-generic/siginfo.h).
const (
	cldExited = 1
	cldKilled = 2
	cldDumped = 3
)

// isGroupStop tells a group-stop from a signal-delivery-stop of a
// stopping signal: PTRACE_GETSIGINFO fails with EINVAL in a group-stop
// (ptrace(2), "Group-stop").
func isGroupStop(pid int, sig syscall.Signal) bool {
	switch sig {
	case syscall.SIGSTOP, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU:
	default:
		return false
	}
	var si unix.Siginfo
	_, _, errno := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_GETSIGINFO, uintptr(pid), 0, uintptr(unsafe.Pointer(&si)), 0, 0)
	return errno == unix.EINVAL
}
