package tracer

import (
	"fmt"
	"strconv"
	"sync"

	"github.com/probekit/probekit/bpfunwind"
	"github.com/probekit/probekit/internal/jsontext"
	"github.com/probekit/probekit/procmaps"
	"github.com/probekit/probekit/profile"
	"github.com/probekit/probekit/record"
	"github.com/probekit/probekit/symbolize"
)

// stackNamer symbolizes the user stacks of --stack (symbolize.Stacks),
// reusing one frame buffer from hit to hit, says why a stack was cut
// short, and adds the processes the CFI walk meets to its tables.
type stackNamer struct {
	stacks *symbolize.Stacks
	frames []symbolize.Frame
	// tables are the CFI walk's (nil with --stack=fp); interp its
	// interpreters' (nil without them).
	tables *bpfunwind.Tables
	interp *interpStacks
	warnf  func(string, ...any)

	// joins takes the processes whose stacks the walk met before their
	// tables were loaded (a trace of the host: a process's first hits)
	// to the goroutine that adds them (runJoins).
	joins chan int
	mu    sync.Mutex
	// pending are the processes in joins or being added; failed those
	// whose tables could not be added (gone, unreadable), not tried
	// again until the next refresh.
	pending, failed map[int]bool
	// early counts the hits walked by frame records alone because their
	// process's tables were not loaded, and their processes.
	early     int
	earlyPIDs map[int]bool
}

// maxJoins is how many processes wait to be added to the tables at
// once; past it a process is tried again at its next hit.
const maxJoins = 256

// newStackNamer names stacks.
func newStackNamer(warnf func(string, ...any)) *stackNamer {
	return &stackNamer{
		stacks:    symbolize.New(nil).Stacks(),
		frames:    make([]symbolize.Frame, 0, 2*record.MaxFrames),
		warnf:     warnf,
		joins:     make(chan int, maxJoins),
		pending:   map[int]bool{},
		failed:    map[int]bool{},
		earlyPIDs: map[int]bool{},
	}
}

// watch starts naming the stacks of p now (symbolize.Stacks.Watch), and
// gives the CFI walk p's objects as they are now.
func (n *stackNamer) watch(p *procmaps.Process) {
	n.stacks.Watch(p)
	if n.tables != nil {
		if err := n.tables.Add(p); err != nil {
			n.warnf("%v: its stacks are walked by frame pointers", err)
		}
		n.interp.add(p, false)
	}
}

// join asks for process pid to be added to the tables, once: a process
// of the host that the trace was not given, seen at its first hits.
func (n *stackNamer) join(pid int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.pending[pid] || n.failed[pid] {
		return
	}
	select {
	case n.joins <- pid:
		n.pending[pid] = true
	default: // full: asked again at a later hit
	}
}

// runJoins adds the processes of join to the tables until done is
// closed.
func (n *stackNamer) runJoins(done <-chan struct{}) {
	for {
		select {
		case <-done:
			return
		case pid := <-n.joins:
			p, err := procmaps.Open(pid)
			if err == nil {
				err = n.tables.Add(p)
			}
			if err == nil {
				n.interp.add(p, false)
			}
			n.mu.Lock()
			delete(n.pending, pid)
			if err != nil {
				n.failed[pid] = true
			}
			n.mu.Unlock()
		}
	}
}

// retryJoins lets the processes that could not be added be tried again
// (at a refresh: a process whose PID was reused, one readable now).
func (n *stackNamer) retryJoins() {
	n.mu.Lock()
	clear(n.failed)
	n.mu.Unlock()
}

// symbolize returns ev's stack, symbolized in its process (a frame per
// address, and per inlined call: symbolize.Process.Stack says how
// return addresses are named), and why the walk stopped short of the
// outermost frame ("" for a whole stack).
func (n *stackNamer) symbolize(ev *record.Event) ([]symbolize.Frame, string) {
	frames, cut := n.symbolizeNative(ev)
	if ev.NInterp == 0 {
		return frames, cut
	}
	frames, _, _, left := n.interp.merged(int(ev.PID), ev.Stack(), frames, ev.InterpStack(), ev.InterpStop)
	if left > 0 && cut == "" {
		cut = leftoverCut(left)
	}
	return frames, cut
}

// symbolizeNative is symbolize without the interpreter frames.
func (n *stackNamer) symbolizeNative(ev *record.Event) ([]symbolize.Frame, string) {
	n.frames = n.stacks.Name(n.frames[:0], int(ev.PID), ev.Stack())
	if n.tables == nil {
		return n.frames, fpCut(ev.NFrames)
	}
	// Whether the process was in the tables when it was hit: it may have
	// exited (and been removed) since.
	if ev.FPSteps > 0 && !n.tables.KnownAt(int(ev.PID), ev.TimeNS) {
		if !n.tables.Known(int(ev.PID)) {
			n.join(int(ev.PID))
		}
		n.mu.Lock()
		n.early++
		n.earlyPIDs[int(ev.PID)] = true
		failed := n.failed[int(ev.PID)]
		n.mu.Unlock()
		if failed {
			return n.frames, fmt.Sprintf("tables of pid %d could not be loaded, walked by frame pointers", ev.PID)
		}
		return n.frames, fmt.Sprintf("tables of pid %d not loaded yet, walked by frame pointers", ev.PID)
	}
	return n.frames, cfiCut(ev.StackStop, ev.FPLast, ev.NFrames, n.frames)
}

// earlyNote says how many hits were walked by frame records alone
// because their process's tables were not loaded yet ("" for none).
func (n *stackNamer) earlyNote() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.early == 0 {
		return ""
	}
	return fmt.Sprintf("--stack: %d hits in %d processes were walked by frame pointers before their processes' tables were loaded (each such stack is marked [truncated: ...])", n.early, len(n.earlyPIDs))
}

// fpCut is why the kernel's frame-pointer walk (--stack=fp) stopped
// short, as far as it can tell: only at its depth limit.
func fpCut(nframes int) string {
	if nframes >= record.MaxFrames {
		return fmt.Sprintf("depth limit of %d frames", record.MaxFrames)
	}
	return ""
}

// cfiCut is why a CFI walk that ended with stop stopped short of the
// outermost frame ("" when it did not); fpLast: its last step tried was
// a frame record's (no CFI row covered the frame). frames are the
// stack's, symbolized: the last names where the walk stopped.
func cfiCut(stop bpfunwind.Stop, fpLast bool, nframes int, frames []symbolize.Frame) string {
	if nframes == 0 {
		return "no stack: the walk read no frame"
	}
	if stop == bpfunwind.StopOutermost {
		// An undefined return address (_start, thread starts) or a
		// zero frame record (the psABI's outermost frame, Go's
		// goroutines, JIT code with frame pointers).
		return ""
	}
	at := where(frames)
	switch {
	case stop == bpfunwind.StopDepth:
		return fmt.Sprintf("depth limit of %d frames", bpfunwind.MaxFrames)
	case fpLast:
		return "no unwind info for " + at
	case stop == bpfunwind.StopRead:
		return "unreadable stack memory after " + at
	case stop == bpfunwind.StopUnsupported:
		return "unwind rule the walk does not compute at " + at
	case stop == bpfunwind.StopNoProgress:
		return "stack pointer did not grow at " + at
	}
	return fmt.Sprintf("walk ended with %v at %s", stop, at)
}

// where names the last frame of a stack: its object and address.
func where(frames []symbolize.Frame) string {
	if len(frames) == 0 {
		return "the first frame"
	}
	f := frames[len(frames)-1]
	if f.Object == "" {
		return "0x" + strconv.FormatUint(f.Address, 16)
	}
	return f.Object + " at 0x" + strconv.FormatUint(f.Address, 16)
}

// appendStackJSON appends ,"stack":[{"address","function","offset","object"
// and, when known, "file","line","inlined"}...], and ,"truncated":REASON
// for a stack cut short. An interpreted frame is {"function", "file" and
// "line" when known, "runtime":"python"}.
func appendStackJSON(b []byte, frames []symbolize.Frame, cut string) []byte {
	b = append(b, `,"stack":[`...)
	for i, f := range frames {
		if i > 0 {
			b = append(b, ',')
		}
		if f.Runtime != "" {
			// An interpreted frame: no address, offset or object.
			b = append(b, `{"function":`...)
			b = jsontext.Append(b, f.Function, false)
			b = jsontext.AppendSource(b, f.File, f.Line, false)
			b = append(b, `,"runtime":`...)
			b = jsontext.Append(b, f.Runtime, false)
			b = append(b, '}')
			continue
		}
		b = append(b, `{"address":`...)
		b = strconv.AppendUint(b, f.Address, 10)
		b = append(b, `,"function":`...)
		b = jsontext.Append(b, f.Function, false)
		b = append(b, `,"offset":`...)
		b = strconv.AppendUint(b, f.Offset, 10)
		b = append(b, `,"object":`...)
		b = jsontext.Append(b, f.Object, false)
		b = jsontext.AppendSource(b, f.File, f.Line, f.Inlined)
		b = append(b, '}')
	}
	b = append(b, ']')
	if cut != "" {
		b = append(b, `,"truncated":`...)
		b = jsontext.Append(b, cut, false)
	}
	return b
}

// appendStackText appends a line per frame, indented by four spaces:
// address, function+offset, object, file:line (symbolize.Frame's
// String); an inlined frame's function is followed by "(inlined)". A
// stack cut short ends with a line "[truncated: REASON]"
// (profile.TruncatedName).
func appendStackText(b []byte, frames []symbolize.Frame, cut string) []byte {
	for _, f := range frames {
		b = append(b, "    "...)
		b = AppendEscaped(b, f.String()) // names from the target's files
		b = append(b, '\n')
	}
	if cut != "" {
		b = append(b, "    "...)
		b = append(b, Escape(profile.TruncatedName(cut))...)
		b = append(b, '\n')
	}
	return b
}
