package profile

import (
	"fmt"

	"github.com/probekit/probekit/symbolize"
)

// Processes is the Symbolizer of the stacks of processes: function
// names, file:line and inlined frames from package symbolize, and each
// location's executable mapping with its object's build-id. It names
// through a symbolize.Stacks, which keeps what it read of each process
// while the process ran: a process is read at its first Locate, or
// earlier by the Stacks (Watch) — a tracer's, whose processes may have
// exited by the time their stacks are made a profile.
type Processes struct {
	st *symbolize.Stacks
}

// NewProcesses returns a Symbolizer naming through sym (nil:
// symbolize.New(nil)); processes are read at their first Locate, so
// call it while they live.
func NewProcesses(sym *symbolize.Symbolizer) *Processes {
	if sym == nil {
		sym = symbolize.New(nil)
	}
	return &Processes{st: sym.Stacks()}
}

// ProcessesOf returns a Symbolizer naming through st: the processes st
// watched are named from what it read while they ran.
func ProcessesOf(st *symbolize.Stacks) *Processes { return &Processes{st: st} }

// Locate implements Symbolizer. Return addresses (all but the first)
// are named at their call instruction (symbolize.Process.Stack); each
// location has one Line per function of its inline chain, innermost
// first.
func (ps *Processes) Locate(pid uint32, addrs []uint64) ([]Location, error) {
	frames := ps.st.Name(nil, int(pid), addrs)
	out := make([]Location, len(addrs))
	i := 0
	for _, f := range frames {
		if i >= len(out) {
			return nil, fmt.Errorf("%d frames for %d addresses", len(frames), len(addrs))
		}
		if f.Function != "" {
			out[i].Lines = append(out[i].Lines, Line{Function: f.Function, File: f.File, Line: int64(f.Line)})
		}
		if f.Inlined {
			continue // the function it was inlined into follows
		}
		look := addrs[i]
		if i > 0 && look > 0 {
			look-- // in the call instruction, as it was named
		}
		if m, ok := ps.st.Mapping(int(pid), look); ok {
			out[i].Mapping = &Mapping{Start: m.Start, Limit: m.End, Offset: m.Offset, File: m.Object, BuildID: m.BuildID}
		}
		i++
	}
	if i != len(out) {
		return nil, fmt.Errorf("%d frames for %d addresses", i, len(addrs))
	}
	return out, nil
}
