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
	// Missing: a probe that none of the objects watched when the watch
	// started has (a mistyped name, or a runtime built without it). It is
	// sent once per probe, with File the number of objects its target
	// selected in Err's text; Err wraps usdt.ErrNotFound or
	// uprobe.ErrNotFound. Objects mapped later are still searched.
	Missing
	// Joined: a process of a host watch maps a file whose probes are
	// attached path-wide: its hits are seen from now on. Sites is the
	// file's attached locations.
	Joined
	// Left: a process of a host watch exited, exec'd another image or
	// unmapped the file of a Joined event.
	Left
)

func (k EventKind) String() string {
	switch k {
	case Attached:
		return "attach"
	case Detached:
		return "detach"
	case Failed:
		return "fail"
	case Missing:
		return "missing"
	case Joined:
		return "join"
	case Left:
		return "leave"
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// Event is a notification of a Tree: a probe attached in, released from,
// or failing in one process.
type Event struct {
	Kind EventKind
	// PID is the process; 0 for the Detached of a path-wide attachment
	// released when the watch closes (every process).
	PID int
	// Probe is the wanted probe concerned; nil for Joined and Left
	// (they concern every probe attached in File).
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
	case Missing:
		return fmt.Sprintf("%s %s: %v", e.Kind, e.Probe, e.Err)
	default:
		return fmt.Sprintf("%s pid %d %s (%d sites)", e.Kind, e.PID, e.Probe, e.Sites)
	}
}
