package main

import (
	"strconv"

	"github.com/probekit/probekit/procmaps"
	"github.com/probekit/probekit/record"
	"github.com/probekit/probekit/symbolize"
)

// maxStackProcs bounds the processes whose maps --stack keeps (a trace of
// every process running a library sees many); past it they are all
// dropped and read again as hits come.
const maxStackProcs = 1024

// stackNamer symbolizes the user stacks of --stack, per process.
type stackNamer struct {
	sym   *symbolize.Symbolizer
	procs map[uint32]*symbolize.Process
	// addrs and frames are the current stack's lookup addresses and
	// frames, reused from hit to hit.
	addrs  []uint64
	frames []symbolize.Frame
}

func newStackNamer() *stackNamer {
	return &stackNamer{
		sym:    symbolize.New(nil),
		procs:  map[uint32]*symbolize.Process{},
		frames: make([]symbolize.Frame, record.MaxFrames),
	}
}

// watch starts naming the stacks of p now: its files' tables are read
// while it runs, so that its hits are named even when they are read after
// it exited (a launched command that ends at once).
func (n *stackNamer) watch(p *procmaps.Process) {
	sp, err := n.sym.ProcessOf(p)
	if err != nil {
		return // its hits will say why: addresses only
	}
	sp.Preload()
	n.add(uint32(p.PID), sp)
}

// symbolize returns ev's stack, symbolized in its process. Frames past the
// first are return addresses: each is looked up at the address before it
// (in its call instruction), then reported with the return address and
// the offset of it. Names come from the tables read while the process
// ran (SymbolizeRecorded), so a process that exited since its hit is still
// named; one never seen alive gives frames with their address only.
func (n *stackNamer) symbolize(ev *record.Event) []symbolize.Frame {
	st := ev.Stack()
	n.addrs = append(n.addrs[:0], st.LookupAddresses()...)
	frames := n.frames[:len(st)]
	p, err := n.process(ev.PID)
	if err == nil {
		err = p.SymbolizeRecorded(frames, n.addrs)
	}
	if err != nil {
		delete(n.procs, ev.PID)
		for i := range frames {
			frames[i] = symbolize.Frame{}
		}
	}
	for i := range frames {
		if frames[i].Function != "" && frames[i].Address != st[i] {
			frames[i].Offset += st[i] - frames[i].Address
		}
		frames[i].Address = st[i]
	}
	return frames
}

func (n *stackNamer) process(pid uint32) (*symbolize.Process, error) {
	if p, ok := n.procs[pid]; ok {
		return p, nil
	}
	p, err := n.sym.Process(int(pid))
	if err != nil {
		return nil, err
	}
	p.Preload() // the process may exit before its next hit is read
	n.add(pid, p)
	return p, nil
}

func (n *stackNamer) add(pid uint32, p *symbolize.Process) {
	if len(n.procs) >= maxStackProcs {
		clear(n.procs)
	}
	n.procs[pid] = p
}

// appendStackJSON appends ,"stack":[{"address","function","offset","object"}...].
func appendStackJSON(b []byte, frames []symbolize.Frame) []byte {
	b = append(b, `,"stack":[`...)
	for i, f := range frames {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"address":`...)
		b = strconv.AppendUint(b, f.Address, 10)
		b = append(b, `,"function":`...)
		b = appendJSON(b, f.Function, false)
		b = append(b, `,"offset":`...)
		b = strconv.AppendUint(b, f.Offset, 10)
		b = append(b, `,"object":`...)
		b = appendJSON(b, f.Object, false)
		b = append(b, '}')
	}
	return append(b, ']')
}

// appendStackText appends a line per frame, indented by four spaces:
// address, function+offset, object (symbolize.Frame's String).
func appendStackText(b []byte, frames []symbolize.Frame) []byte {
	for _, f := range frames {
		b = append(b, "    "...)
		b = append(b, f.String()...)
		b = append(b, '\n')
	}
	return b
}
