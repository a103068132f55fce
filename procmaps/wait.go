package procmaps

import (
	"context"
	"errors"
	"time"

	"golang.org/x/sys/unix"
)

// waitPoll bounds how long WaitExit takes to notice a cancelled context,
// and is the polling period where pidfds are missing (before Linux 5.3).
const waitPoll = 100 * time.Millisecond

// WaitExit blocks until the process exits (or its PID now names another
// process), or until ctx ends; it returns nil when the process is gone
// and ctx.Err() otherwise. The process need not be a child of the caller:
// it waits on a pidfd (pidfd_open, Linux 5.3), which becomes readable when
// the process exits, and checks the start time after opening it, so a
// reused PID is not waited for. Without pidfds it polls Check.
func (p *Process) WaitExit(ctx context.Context) error {
	fd, err := unix.PidfdOpen(p.PID, 0)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return nil // gone already
		}
		return p.pollExit(ctx)
	}
	defer unix.Close(fd)
	// The pidfd refers to whoever had the PID when it was opened: make
	// sure that is still p.
	if p.Check() != nil {
		return nil
	}
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		n, err := unix.Poll(fds, int(waitPoll/time.Millisecond))
		if err != nil && !errors.Is(err, unix.EINTR) {
			return p.pollExit(ctx)
		}
		if n > 0 {
			return nil
		}
	}
}

func (p *Process) pollExit(ctx context.Context) error {
	tick := time.NewTicker(waitPoll)
	defer tick.Stop()
	for p.Check() == nil {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}
