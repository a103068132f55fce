package tracer

import (
	"strconv"

	"github.com/probekit/probekit/bpfunwind"
	"github.com/probekit/probekit/internal/jsontext"
	"github.com/probekit/probekit/procmaps"
	"github.com/probekit/probekit/record"
	"github.com/probekit/probekit/symbolize"
	"github.com/probekit/probekit/unwind"
	"github.com/probekit/probekit/usdt/bpf"
)

// stackNamer symbolizes the user stacks of --stack (symbolize.Stacks),
// reusing one frame buffer from hit to hit.
type stackNamer struct {
	stacks *symbolize.Stacks
	frames []symbolize.Frame
	// unwinder walks the stack copies of --stack=cfi (nil without).
	unwinder *unwind.Processes
	// tables are the CFI walk's of --count --stack=cfi (nil without).
	tables *bpfunwind.Tables
	warnf  func(string, ...any)
}

// newStackNamer names stacks; copies, when set, makes it unwind the
// stack copies of hits.
func newStackNamer(copies bool, warnf func(string, ...any)) *stackNamer {
	n := &stackNamer{
		stacks: symbolize.New(nil).Stacks(),
		frames: make([]symbolize.Frame, 0, 2*record.MaxFrames),
		warnf:  warnf,
	}
	if copies {
		n.unwinder = unwind.NewCache().Processes()
	}
	return n
}

// watch starts naming the stacks of p now (symbolize.Stacks.Watch), and
// gives the CFI walk p's objects as they are now.
func (n *stackNamer) watch(p *procmaps.Process) {
	n.stacks.Watch(p)
	if n.unwinder != nil {
		n.unwinder.Watch(p)
	}
	if n.tables != nil {
		if err := n.tables.Add(p); err != nil {
			n.warnf("%v: its stacks are walked by frame pointers", err)
		}
	}
}

// symbolize returns ev's stack, symbolized in its process: a frame per
// address, and per inlined call (symbolize.Process.Stack says how return
// addresses are named).
func (n *stackNamer) symbolize(ev *record.Event) []symbolize.Frame {
	stack := ev.Stack()
	if n.unwinder != nil && ev.Copy != nil {
		// --stack=cfi: the copy, walked with the objects' CFI.
		if s, err := bpf.DecodeStackCopy(ev.Copy); err == nil {
			s.AtEntry = ev.Kind == record.KindUprobe
			stack = n.unwinder.Unwind(int(ev.PID), s).Frames
		}
	}
	n.frames = n.stacks.Name(n.frames[:0], int(ev.PID), stack)
	return n.frames
}

// appendStackJSON appends ,"stack":[{"address","function","offset","object"
// and, when known, "file","line","inlined"}...].
func appendStackJSON(b []byte, frames []symbolize.Frame) []byte {
	b = append(b, `,"stack":[`...)
	for i, f := range frames {
		if i > 0 {
			b = append(b, ',')
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
	return append(b, ']')
}

// appendStackText appends a line per frame, indented by four spaces:
// address, function+offset, object, file:line (symbolize.Frame's
// String); an inlined frame's function is followed by "(inlined)".
func appendStackText(b []byte, frames []symbolize.Frame) []byte {
	for _, f := range frames {
		b = append(b, "    "...)
		b = AppendEscaped(b, f.String()) // names from the target's files
		b = append(b, '\n')
	}
	return b
}
