package main

import (
	"errors"
	"os"
	"syscall"
)

// endSignals end a trace or a listing as Ctrl-C does: the probes are
// detached, the semaphores released, a launched command ended (SIGTERM,
// SIGKILL a second later if it is still running), the counts printed if
// the output is still open, and probekit exits 0. SIGHUP is a closed
// terminal or ssh session; SIGPIPE a closed output (probekit trace … |
// head -1): caught, it no longer kills probekit before it cleans up, and
// the write that raised it fails with EPIPE instead (quietEnd).
var endSignals = []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGPIPE}

// quietEnd is err, except that a closed output (EPIPE: its reader, head
// or less, is done) is the trace's normal end, not a failure.
func quietEnd(err error) error {
	if errors.Is(err, syscall.EPIPE) {
		return nil
	}
	return err
}
