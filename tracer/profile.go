package tracer

import (
	"bytes"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/cilium/ebpf"

	"github.com/probekit/probekit/bpfunwind"
	"github.com/probekit/probekit/internal/atomicfile"
	"github.com/probekit/probekit/interp"
	"github.com/probekit/probekit/interp/python"
	"github.com/probekit/probekit/procmaps"
	"github.com/probekit/probekit/profile"
	"github.com/probekit/probekit/record"
	"github.com/probekit/probekit/symbolize"
)

// HasStackKey reports whether the counts are keyed by stack.
func (cfg *Config) HasStackKey() bool {
	for _, k := range cfg.Keys {
		if k.Kind == record.KeyStack || k.Kind == record.KeyStackCFI {
			return true
		}
	}
	return false
}

// hasCFIKey reports whether a key part asks for the CFI walk by kind
// (record.KeyStackCFI, which a Go caller may give).
func (cfg *Config) hasCFIKey() bool {
	for _, k := range cfg.Keys {
		if k.Kind == record.KeyStackCFI {
			return true
		}
	}
	return false
}

// walksCFI reports whether the trace's stacks are walked inside BPF
// (bpfunwind: CFI where an object has it, frame records where not):
// Stack or a stack key without FramePointers, on x86-64.
func (cfg *Config) walksCFI() bool {
	if cfg.hasCFIKey() {
		return true
	}
	if cfg.FramePointers || runtime.GOARCH != "amd64" {
		return false
	}
	switch cfg.Mode {
	case record.ModeEvents:
		return cfg.Stack
	case record.ModeCount:
		return cfg.HasStackKey()
	}
	return false
}

// countsCFI reports whether the counts are keyed by stacks unwound
// inside BPF from CFI (bpfunwind).
func (cfg *Config) countsCFI() bool {
	return cfg.Mode == record.ModeCount && cfg.walksCFI()
}

// framePointersNote is the warning of a trace whose stacks are walked
// by frame pointers because the CFI walk is not built for the machine.
func (cfg *Config) framePointersNote() string {
	if cfg.FramePointers || runtime.GOARCH == "amd64" || !(cfg.Stack || cfg.HasStackKey()) {
		return ""
	}
	return fmt.Sprintf("--stack: the whole-stack walk (CFI) is for x86-64; on %s stacks are walked by frame pointers, as with --stack=fp, and stop where code has none", runtime.GOARCH)
}

// tablesRefresh is how often the CFI walk's tables are read again from
// the traced processes (bpfunwind.Tables.Refresh): a library one maps
// (dlopen) is walked by frame pointers until then, and the tables of
// processes that exited are freed.
const tablesRefresh = time.Second

// startTables gives the stacks' namer the CFI walk's tables, and
// refreshes them every tablesRefresh; in a trace of the host it adds
// the processes the walk meets, from their first hit (stackNamer.join:
// in the loop for printed stacks; from the counted stacks' processes at
// each refresh for --count). The returned function stops both and
// prints what could not be loaded and how many hits were walked by
// frame pointers before their process was added.
func (t *tracer) startTables(objs *record.Objects, tables *bpfunwind.Tables, py *python.Tables) (stop func()) {
	n := t.stacks
	n.tables = tables
	if py != nil {
		n.interp = newInterpStacks(py, t.warnf)
		if t.cfg.Mode == record.ModeCount {
			n.interp.objs = objs
		}
	}
	hostWide := t.cfg.Process == nil && len(t.cfg.Command) == 0
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { n.runJoins(done) })
	wg.Go(func() { n.interp.run(done) })
	wg.Go(func() {
		tick := time.NewTicker(tablesRefresh)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				if err := tables.Refresh(); err != nil {
					t.warnf("%v", err)
				}
				n.interp.refresh()
				n.retryJoins()
				if hostWide && t.cfg.Mode == record.ModeCount {
					t.joinCounted(objs)
				}
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
		defer n.interp.close()
		t.tablesWarnings(tables)
		if note := n.earlyNote(); note != "" {
			t.warnf("%s", note)
		}
	}
}

// joinCounted adds to the tables the processes of the stacks counted so
// far that they do not hold: in --count, nothing is sent per hit.
func (t *tracer) joinCounted(objs *record.Objects) {
	entries, err := objs.Keyed()
	if err != nil {
		return
	}
	seen := map[uint32]bool{}
	for _, e := range entries {
		pid := e.Key.StackPID
		if pid == 0 || seen[pid] {
			continue
		}
		seen[pid] = true
		if !t.stacks.tables.Known(int(pid)) {
			t.stacks.join(int(pid))
		}
	}
}

// tablesWarnings says which objects the CFI walk could not load tables
// for: their frames were walked by frame pointers.
func (t *tracer) tablesWarnings(tables *bpfunwind.Tables) {
	for _, err := range tables.Errors() {
		t.warnf("%v: walked by frame pointers", err)
	}
}

// setStackRecords makes the records of hits carry the user stack
// (--stack): the CFI walk inside BPF (record.SetStackCFI), or the
// kernel's frame-pointer walk (--stack=fp, other architectures).
func setStackRecords(spec *ebpf.CollectionSpec, cfg *Config) error {
	if cfg.walksCFI() {
		return record.SetStackCFI(spec)
	}
	return spec.Variables[record.StackName].Set(uint32(1))
}

// watchLaunched starts naming the stacks of a launched command, read
// again at its execs and its exit (symbolize.Stacks.WatchLaunched), and
// gives the CFI walk its objects (bpfunwind.Tables.Watch).
func (n *stackNamer) watchLaunched(l *procmaps.Launched) {
	n.stacks.WatchLaunched(l)
	if n.tables != nil {
		if err := n.tables.Watch(l); err != nil {
			n.warnf("%v: its stacks are walked by frame pointers", err)
		}
		n.interp.watchLaunched(l)
	}
}

// stackKey formats a stack key part: the frames as text lines, and as a
// JSON array; a stack cut short ends with its marker line, and its JSON
// with the member "truncated" after the array.
func (t *tracer) stackKey(objs *record.Objects, k record.Key) (string, string) {
	var frames []symbolize.Frame
	cut := ""
	if w, err := objs.Walked(k); err == nil {
		frames, cut, _, _ = t.stacks.counted(k.StackPID, w)
	}
	text := string(appendStackText(nil, frames, cut))
	js := appendStackJSON(nil, frames, cut)
	return text, string(js[len(`,"stack":`):])
}

// counted names a counted stack: its frames with the interpreter's
// among them, why it was cut short, and for a profile the merge's parts
// and interpreted frames (nil without them).
func (n *stackNamer) counted(pid uint32, w record.WalkedStack) ([]symbolize.Frame, string, []interp.Part, []interp.Frame) {
	frames := n.stacks.Name(nil, int(pid), w.Native)
	cut := n.countedCut(w.Stop, len(w.Native), frames)
	frames, parts, py, left := n.interp.merged(int(pid), w.Native, frames, w.Interp, w.InterpStop)
	if left > 0 && cut == "" {
		cut = leftoverCut(left)
	}
	return frames, cut, parts, py
}

// countedCut is why a counted stack was cut short: what the walk's end
// says (a counted stack does not say whether its last step was a frame
// record's).
func (n *stackNamer) countedCut(stop bpfunwind.Stop, nframes int, frames []symbolize.Frame) string {
	if n.tables == nil {
		return fpCut(nframes)
	}
	return cfiCut(stop, false, nframes, frames)
}

// printStackCounts prints the counts of a stack key: per distinct stack
// (and the other key parts), most frequent first, its count and the
// other parts, then its frames; or the folded lines (--folded); and
// writes --pprof; or hands the profile to OnProfile.
func (t *tracer) printStackCounts(objs *record.Objects) error {
	b := t.out.buf[:0]
	if t.cfg.Folded || t.cfg.Pprof != "" || t.cfg.OnProfile != nil {
		p, err := t.stackProfile(objs)
		if err != nil {
			return err
		}
		if t.cfg.OnProfile != nil {
			// The Go caller's instead of any output.
			return t.cfg.OnProfile(p)
		}
		if t.cfg.Pprof != "" {
			if err := writeProfile(t.cfg.Pprof, p); err != nil {
				return err
			}
			if !t.cfg.Folded && !t.cfg.StackTable {
				return nil
			}
		}
		if t.cfg.Folded {
			var buf bytes.Buffer
			if err := profile.WriteFolded(&buf, p); err != nil {
				return err
			}
			return t.flushAggregate(append(b, buf.Bytes()...))
		}
	}
	totals, err := t.keyedTotals(objs)
	if err != nil {
		return err
	}
	if t.cfg.JSON {
		return t.flushAggregate(t.appendKeyedJSON(b, totals))
	}
	for i, kt := range totals {
		if i > 0 {
			b = append(b, '\n')
		}
		b = fmt.Appendf(b, "%d", kt.count)
		stack := ""
		for j, p := range t.cfg.Keys {
			if p.Kind == record.KeyStack {
				stack = kt.text[j]
				continue
			}
			b = fmt.Appendf(b, "  %s=%s", p.Name, kt.label[j])
		}
		b = append(append(b, '\n'), stack...)
	}
	return t.flushAggregate(b)
}

// stackProfile makes a pprof profile of the counted stacks: one sample
// per key with a stack, its value the count, labeled with the other key
// parts.
func (t *tracer) stackProfile(objs *record.Objects) (*profile.Profile, error) {
	entries, err := objs.Keyed()
	if err != nil {
		return nil, err
	}
	var stacks []profile.Stack
	for _, e := range entries {
		w, err := objs.Walked(e.Key)
		if err != nil {
			continue // a stack the kernel could not read or keep
		}
		_, cut, parts, py := t.stacks.counted(e.Key.StackPID, w)
		stacks = append(stacks, profile.Stack{PID: e.Key.StackPID, Frames: w.Native, Count: e.Count, Truncated: cut, Parts: parts, Interp: py})
	}
	p, err := profile.Build(stacks, profile.ProcessesOf(t.stacks.stacks), &profile.Options{CountName: "hits", CountUnit: "count"})
	if p == nil {
		return nil, err
	}
	if err != nil {
		t.warnf("%v", err)
	}
	return p, nil
}

// writeProfile writes p, gzipped as go tool pprof reads it, to path:
// aside, then renamed over it (internal/atomicfile).
func writeProfile(path string, p *profile.Profile) error {
	if err := atomicfile.Write(path, p.Write); err != nil {
		return fmt.Errorf("--pprof: %w", err)
	}
	return nil
}
