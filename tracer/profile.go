package tracer

import (
	"bytes"
	"fmt"
	"os"
	"time"

	"github.com/cilium/ebpf"

	"github.com/probekit/probekit/bpfunwind"
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

// countsCFI reports whether the counts are keyed by stacks unwound
// inside BPF from CFI (bpfunwind).
func (cfg *Config) countsCFI() bool {
	if cfg.Mode != record.ModeCount {
		return false
	}
	for _, k := range cfg.Keys {
		if k.Kind == record.KeyStackCFI || k.Kind == record.KeyStack && cfg.CFI {
			return true
		}
	}
	return false
}

// tablesRefresh is how often the CFI walk's tables are read again from
// the traced processes (bpfunwind.Tables.Refresh): a library one maps
// (dlopen) is walked by frame pointers until then, and the tables of
// processes that exited are freed.
const tablesRefresh = time.Second

// refreshTables refreshes tables every tablesRefresh until the returned
// function is called.
func (t *tracer) refreshTables(tables *bpfunwind.Tables) (stop func()) {
	done := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
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
			}
		}
	}()
	return func() {
		close(done)
		<-ended
	}
}

// tablesWarnings says which objects the CFI walk could not load tables
// for: their frames were walked by frame pointers.
func (t *tracer) tablesWarnings(tables *bpfunwind.Tables) {
	for _, err := range tables.Errors() {
		t.warnf("%v: walked by frame pointers", err)
	}
}

// copyPages is how many 4 KiB pages of the stack --stack=cfi copies per
// hit, from the stack pointer's page (the part of that page below the
// stack pointer is not read).
const copyPages = 2

// setStackRecords makes the records of hits carry the user stack
// (--stack): the kernel's frame-pointer walk, or with --stack=cfi a copy
// of the stack top, unwound in user space (package unwind).
func setStackRecords(spec *ebpf.CollectionSpec, cfg *Config) error {
	if cfg.CFI {
		return record.SetStackCopy(spec, copyPages)
	}
	return spec.Variables[record.StackName].Set(uint32(1))
}

// watchLaunched starts naming (and with --stack=cfi unwinding) the
// stacks of a launched command, read again at its execs and its exit
// (symbolize.Stacks.WatchLaunched, unwind.Processes.WatchLaunched).
func (n *stackNamer) watchLaunched(l *procmaps.Launched) {
	n.stacks.WatchLaunched(l)
	if n.unwinder != nil {
		n.unwinder.WatchLaunched(l)
	}
	if n.tables != nil {
		if err := n.tables.Watch(l); err != nil {
			n.warnf("%v: its stacks are walked by frame pointers", err)
		}
	}
}

// stackKey formats a stack key part: the frames as text lines, and as a
// JSON array.
func (t *tracer) stackKey(objs *record.Objects, k record.Key) (string, string) {
	var frames []symbolize.Frame
	if s, err := objs.Stack(k); err == nil {
		frames = t.stacks.stacks.Name(nil, int(k.StackPID), s)
	}
	text := string(appendStackText(nil, frames))
	js := appendStackJSON(nil, frames)
	return text, string(js[len(`,"stack":`):])
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
		s, err := objs.Stack(e.Key)
		if err != nil {
			continue // a stack the kernel could not read or keep
		}
		stacks = append(stacks, profile.Stack{PID: e.Key.StackPID, Frames: s, Count: e.Count})
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

// writeProfile writes p, gzipped as go tool pprof reads it, to path.
func writeProfile(path string, p *profile.Profile) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	err = p.Write(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("--pprof %s: %w", path, err)
	}
	return nil
}
