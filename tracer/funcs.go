package tracer

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"

	"github.com/probekit/probekit/attach"
	"github.com/probekit/probekit/internal/jsontext"
	"github.com/probekit/probekit/probe"
	"github.com/probekit/probekit/procmaps"
	"github.com/probekit/probekit/record"
	"github.com/probekit/probekit/uprobe"
)

// funcAttacher attaches the function probes of one trace: the files it
// opened (one per TARGET) and where the probes go.
type funcAttacher struct {
	t    *tracer
	prog *ebpf.Program
	// table is where prog finds a site's cookie on a kernel without BPF
	// cookies (uprobe.Options.AddressTable).
	table *ebpf.Map
	// proc is the traced process (-p or the launched command), nil for
	// every process.
	proc *procmaps.Process
	bins map[string]*uprobe.Binary
}

// open opens target, once per trace: as the traced process sees it, or
// as the tracer does.
func (fa *funcAttacher) open(target string) (*uprobe.Binary, error) {
	if b, ok := fa.bins[target]; ok {
		return b, nil
	}
	b, err := openFuncTarget(target, fa.proc)
	if err != nil {
		return nil, err
	}
	if fa.bins == nil {
		fa.bins = map[string]*uprobe.Binary{}
	}
	fa.bins[target] = b
	return b, nil
}

// openFuncTarget opens target as proc sees it (as the tracer does for a
// nil proc) and refuses a program whose arguments are not in registers.
func openFuncTarget(target string, proc *procmaps.Process) (*uprobe.Binary, error) {
	var b *uprobe.Binary
	var err error
	if proc != nil {
		b, err = uprobe.OpenProcess(proc, target)
	} else {
		b, err = uprobe.Open(target)
	}
	if err != nil {
		return nil, err
	}
	if err := b.CheckRegisterArgs(); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

// close releases the files; the attached probes stay.
func (fa *funcAttacher) close() {
	for name, b := range fa.bins {
		b.Close()
		delete(fa.bins, name)
	}
}

// attach resolves p's functions in its target and attaches trace_func to
// all of them as one attachment (one uprobe_multi link where the kernel
// has it), skipping those that cannot take the probe.
func (fa *funcAttacher) attach(p probe.Spec) (*attach.Link, error) {
	b, err := fa.open(p.Target)
	if err != nil {
		return nil, err
	}
	fs, err := fa.t.funcSites(b, p)
	if err != nil {
		return nil, err
	}
	var skipped skippedFuncs
	skip := func(fn uprobe.Function, err error) {
		skipped.add(fn, err)
		fa.t.sites[fs.index[fn.Address]].skipped = true
	}
	opts := &uprobe.Options{FunctionCookie: fs.cookie, Skip: skip, AddressTable: fa.table}
	if len(fs.fns) == 1 {
		opts.Skip = nil // a single function's error is the error
	}
	var l *attach.Link
	if p.Kind == record.KindUretprobe {
		// Uretprobes on native code; on Go, where a uretprobe crashes
		// the program, a probe on each return instruction.
		l, err = b.Returns(fs.fns, fa.prog, opts)
	} else {
		l, err = b.Entries(fs.fns, fa.prog, opts)
	}
	skipped.warn(fa.t, p, len(fs.fns))
	if err != nil {
		return nil, err
	}
	return l, nil
}

// funcSites is the sites of one function probe: the functions, and the
// cookie trace_func reads at each.
type funcSites struct {
	fns    []uprobe.Function
	byAddr map[uint64]uint64 // cookie by address
	index  map[uint64]int    // site index by address
	first  uint64
}

// cookie is the cookie of fn; for another copy of the file (a process's
// own root) with other addresses, the first function's.
func (fs *funcSites) cookie(fn uprobe.Function) uint64 {
	if c, ok := fs.byAddr[fn.Address]; ok {
		return c
	}
	return fs.first
}

// funcSites resolves p's functions in b (uprobe.Binary.Resolve: globs,
// one function per address), adds a site for each and gives each the
// cookie that tells trace_func what to read: the registers of its
// calling convention, the return register for a uretprobe.
func (t *tracer) funcSites(b *uprobe.Binary, p probe.Spec) (*funcSites, error) {
	fns, err := b.Resolve(p.Func)
	if err != nil {
		return nil, err
	}
	if n := len(t.sites) + len(fns); t.cfg.Mode == record.ModeCount && n > record.MaxCounted {
		return nil, fmt.Errorf("--count counts at most %d probe sites, these probes have %d or more", record.MaxCounted, n)
	}
	fs := &funcSites{fns: fns, byAddr: make(map[uint64]uint64, len(fns)), index: make(map[uint64]int, len(fns))}
	warned := false
	for i, fn := range fns {
		regs, strMask := record.RegsC, t.cfg.strMask
		switch conv := b.Convention(fn); {
		case p.Kind == record.KindUretprobe:
			regs, strMask = record.RegsRet, 0
		case conv == uprobe.ConventionGo:
			regs = record.RegsGo
		case conv == uprobe.ConventionGoStack && !warned:
			warned = true
			t.warnf("%s was built with %s, which passes Go arguments on the stack: the registers printed are not the arguments", p.Target, b.GoVersion())
		}
		sp := t.paramsFor(b, fn, p.Kind, regs, len(fns), strMask)
		if sp != nil {
			regs, strMask = sp.regs, strMask|sp.strMask
		}
		if t.funcRegs != nil && regs != *t.funcRegs {
			return nil, fmt.Errorf("%s: %s: the program was built for sites sending registers %d, this one sends %d (did the file change?)", p.Target, fn.Name, *t.funcRegs, regs)
		}
		cookie, err := record.FuncCookie(uint32(len(t.sites)), regs, p.Kind, strMask)
		if err != nil {
			return nil, err
		}
		cookie = t.funcLatencyCookie(p, len(t.sites), cookie, b.Convention(fn) == uprobe.ConventionGo)
		fs.index[fn.Address] = len(t.sites)
		t.funcSite(p.Kind, funcName(fn), fn.Address)
		if sp != nil {
			t.setParams(&t.sites[len(t.sites)-1], sp, fn.Address)
		}
		fs.byAddr[fn.Address] = cookie
		if i == 0 {
			fs.first = cookie
		}
	}
	return fs, nil
}

// skippedFuncs counts the functions of a glob left out, by reason.
type skippedFuncs struct {
	n       int
	reasons map[string]int
	example map[string]string
}

func (s *skippedFuncs) add(fn uprobe.Function, err error) {
	if s.reasons == nil {
		s.reasons, s.example = map[string]int{}, map[string]string{}
	}
	reason := err.Error()
	for _, e := range []error{uprobe.ErrKernelRefused, uprobe.ErrNoReturn, uprobe.ErrUncertainSite} {
		if errors.Is(err, e) {
			reason = e.Error()
		}
	}
	s.n++
	s.reasons[reason]++
	if _, ok := s.example[reason]; !ok {
		s.example[reason] = funcName(fn)
	}
}

// warn prints one line for the functions of p left out.
func (s *skippedFuncs) warn(t *tracer, p probe.Spec, of int) {
	if s.n == 0 {
		return
	}
	var parts []string
	for r, n := range s.reasons {
		parts = append(parts, fmt.Sprintf("%d: %s (%s, ...)", n, r, s.example[r]))
	}
	slices.Sort(parts)
	t.warnf("%s: skipped %d of the %d functions matching %q: %s", p.Target, s.n, of, p.Func, strings.Join(parts, "; "))
}

// funcName is how lines name fn: without its version unless that is a
// hidden one (memcpy@GLIBC_2.2.5).
func funcName(fn uprobe.Function) string {
	if fn.Version == "" || fn.DefaultVersion {
		return fn.Name
	}
	return fn.String()
}

// funcSite adds the site of a function probe; its index is the probe's
// cookie index.
func (t *tracer) funcSite(kind record.Kind, name string, addr uint64) {
	s := Site{Kind: kind, Function: name, Address: addr}
	label, end := "uprobe", t.form.argsEnd
	if kind == record.KindUretprobe {
		label, end = "uretprobe", t.form.retEnd
	}
	s.end = []byte(end)
	s.Label = label + ":" + name
	if t.cfg.JSON {
		s.head = append(s.head, `{"kind":"`...)
		s.head = append(s.head, label...)
		s.head = append(s.head, `","function":`...)
		s.head = jsontext.Append(s.head, name, false)
		s.head = append(s.head, `,"pid":`...)
		s.mid = append(s.mid, `,"address":`...)
		s.mid = strconv.AppendUint(s.mid, addr, 10)
		if kind == record.KindUretprobe {
			s.mid = append(s.mid, `,"ret":`...)
		} else {
			s.mid = append(s.mid, `,"args":[`...)
		}
	} else {
		s.mid = fmt.Appendf(nil, " %s:%s @%#x ", label, Escape(name), addr)
		if kind == record.KindUretprobe {
			s.mid = append(s.mid, "= "...)
		} else {
			s.mid = append(s.mid, '[')
		}
	}
	t.sites = append(t.sites, s)
}

// knownFuncRegs is the kind of registers every function site of cfg
// sends (funcSites), when it is known before load: the return register
// of a uretprobe, and C's registers for an entry, where the target is not
// a Go program (Go's functions take Go's registers; a Go function's
// return, printed by type, may take more than one) and is found before
// load as at attach (a path, or -p's view of a name; not a launched
// command's view of a name, nor followed processes).
func knownFuncRegs(cfg *Config) (record.Regs, bool) {
	if cfg.Follow || followSelectors(cfg) {
		return 0, false
	}
	var regs record.Regs
	first := true
	for _, p := range cfg.Probes {
		if p.Kind == record.KindUSDT {
			continue
		}
		r := record.RegsC
		if p.Kind == record.KindUretprobe {
			r = record.RegsRet
		}
		if p.Kind == record.KindUprobe || cfg.Mode == record.ModeEvents {
			if cfg.Process == nil && len(cfg.Command) > 0 && !strings.Contains(p.Target, "/") {
				return 0, false
			}
			b, err := openFuncTarget(p.Target, cfg.Process)
			if err != nil {
				return 0, false
			}
			goProgram := b.IsGo()
			b.Close()
			if goProgram {
				return 0, false
			}
		}
		if !first && r != regs {
			return 0, false
		}
		regs, first = r, false
	}
	return regs, !first
}
