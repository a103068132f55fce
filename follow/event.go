package follow

import (
	"fmt"
)

// EventKind says what an Event reports.
type EventKind uint8

const (
	// Attached: a probe is attached in a process (for its current image).
	Attached EventKind = iota + 1
	// Detached: a process exec'd another image or exited, and its links
	// of a probe are released.
	Detached
	// Failed: a probe could not be attached in a process. The other
	// probes and processes are not affected.
	Failed
)

func (k EventKind) String() string {
	switch k {
	case Attached:
		return "attach"
	case Detached:
		return "detach"
	case Failed:
		return "fail"
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// Event is a notification of a Tree: a probe attached in, released from,
// or failing in one process.
type Event struct {
	Kind EventKind
	// PID is the process.
	PID int
	// Probe is the wanted probe concerned.
	Probe *Probe
	// File is the file the probe is in (Probe.Target, resolved).
	File string
	// Sites is the number of locations attached (Attached, Detached).
	Sites int
	// Err says why a probe failed.
	Err error
}

func (e Event) String() string {
	switch e.Kind {
	case Failed:
		return fmt.Sprintf("%s pid %d %s: %v", e.Kind, e.PID, e.Probe, e.Err)
	default:
		return fmt.Sprintf("%s pid %d %s (%d sites)", e.Kind, e.PID, e.Probe, e.Sites)
	}
}
