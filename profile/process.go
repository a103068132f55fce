package profile

import (
	"encoding/hex"
	"sort"

	"github.com/probekit/probekit/internal/safeelf"
	"github.com/probekit/probekit/procmaps"
	"github.com/probekit/probekit/symbolize"
)

// Processes is the Symbolizer of live processes: function names (and
// Go's file:line) from package symbolize, mappings from /proc/PID/maps
// with each object's build-id. It keeps what it read per process; call
// Locate while the processes live.
type Processes struct {
	sym   *symbolize.Symbolizer
	procs map[uint32]*located
	ids   map[procmaps.FileID]string
}

type located struct {
	sp   *symbolize.Process
	maps []Mapping
}

// NewProcesses returns a Symbolizer naming through sym (nil: symbolize.New(nil)).
func NewProcesses(sym *symbolize.Symbolizer) *Processes {
	if sym == nil {
		sym = symbolize.New(nil)
	}
	return &Processes{sym: sym, procs: map[uint32]*located{}, ids: map[procmaps.FileID]string{}}
}

// Locate implements Symbolizer.
func (ps *Processes) Locate(pid uint32, addrs []uint64) ([]Location, error) {
	l, err := ps.process(pid)
	if err != nil {
		return nil, err
	}
	// Return addresses are looked up in their call instruction.
	look := make([]uint64, len(addrs))
	for i, a := range addrs {
		if i > 0 && a > 0 {
			a--
		}
		look[i] = a
	}
	frames, err := l.sp.Symbolize(look)
	if err != nil {
		return nil, err
	}
	out := make([]Location, len(addrs))
	for i, f := range frames {
		if f.Function != "" {
			out[i].Lines = []Line{{Function: f.Function, File: f.File, Line: int64(f.Line)}}
		}
		j := sort.Search(len(l.maps), func(j int) bool { return l.maps[j].Limit > look[i] })
		if j < len(l.maps) && look[i] >= l.maps[j].Start {
			out[i].Mapping = &l.maps[j]
		}
	}
	return out, nil
}

func (ps *Processes) process(pid uint32) (*located, error) {
	if l := ps.procs[pid]; l != nil {
		return l, nil
	}
	proc, err := procmaps.Open(int(pid))
	if err != nil {
		return nil, err
	}
	sp, err := ps.sym.ProcessOf(proc)
	if err != nil {
		return nil, err
	}
	objs, err := proc.Objects()
	if err != nil {
		return nil, err
	}
	l := &located{sp: sp}
	for i := range objs {
		o := &objs[i]
		id := ps.buildID(proc, o)
		for _, m := range o.Mappings {
			if m.Perms&procmaps.Exec != 0 {
				l.maps = append(l.maps, Mapping{Start: m.Start, Limit: m.End, Offset: m.Offset, File: o.Path, BuildID: id})
			}
		}
	}
	sort.Slice(l.maps, func(i, j int) bool { return l.maps[i].Start < l.maps[j].Start })
	ps.procs[pid] = l
	return l, nil
}

// buildID reads an object's build-id once per file; "" when it has
// none or cannot be read (the mapping is still written, without it).
func (ps *Processes) buildID(proc *procmaps.Process, o *procmaps.Object) string {
	if id, ok := ps.ids[o.ID()]; ok {
		return id
	}
	id := ""
	if f, err := proc.OpenObject(o); err == nil {
		if ef, err := safeelf.NewFile(f); err == nil {
			if b, err := ef.BuildID(); err == nil {
				id = hex.EncodeToString(b)
			}
		}
		f.Close()
	}
	ps.ids[o.ID()] = id
	return id
}
