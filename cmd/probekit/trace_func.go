package main

import (
	"cmp"
	"debug/elf"
	"errors"
	"fmt"
	"go/version"
	"os"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"

	"github.com/probekit/probekit/attach"
	"github.com/probekit/probekit/record"
	"github.com/probekit/probekit/uprobe"
)

// funcAttacher attaches the function probes of one trace: the files it
// opened (one per TARGET) and where the probes go.
type funcAttacher struct {
	t    *tracer
	prog *ebpf.Program
	// pid is the traced process (-p or the launched command), 0 for
	// every process.
	pid  int
	bins map[string]*uprobe.Binary
}

// open opens target, once per trace: as the traced process sees it, or
// as the tracer does.
func (fa *funcAttacher) open(target string) (*uprobe.Binary, error) {
	if b, ok := fa.bins[target]; ok {
		return b, nil
	}
	var b *uprobe.Binary
	var err error
	if fa.pid != 0 {
		b, err = uprobe.OpenProcess(fa.pid, target)
	} else {
		b, err = uprobe.Open(target)
	}
	if err != nil {
		return nil, err
	}
	if err := checkFuncMachine(b); err != nil {
		b.Close()
		return nil, err
	}
	if fa.bins == nil {
		fa.bins = map[string]*uprobe.Binary{}
	}
	fa.bins[target] = b
	return b, nil
}

// close releases the files; the attached probes stay.
func (fa *funcAttacher) close() {
	for name, b := range fa.bins {
		b.Close()
		delete(fa.bins, name)
	}
}

// checkFuncMachine refuses a binary whose calling convention trace_func
// does not read: it reads 64-bit registers, and a 32-bit program the host
// runs (i386 on x86-64, arm on arm64) passes its arguments on the stack.
// checkMachine has refused the other architectures.
func checkFuncMachine(b *uprobe.Binary) error {
	if m := b.Machine(); m != elf.EM_X86_64 && m != elf.EM_AARCH64 {
		return fmt.Errorf("%s is built for %s: function probes read the argument registers of x86-64 and arm64 programs", b.Path(), machineName(m))
	}
	return nil
}

// goRegisterABI is the first Go release passing arguments in registers
// (ABIInternal) on each architecture; before, they are on the stack.
var goRegisterABI = map[elf.Machine]string{
	elf.EM_X86_64:  "go1.17",
	elf.EM_AARCH64: "go1.18",
}

// attach resolves p's functions in its target and attaches trace_func to
// each, returning the links made (to close on error too).
func (fa *funcAttacher) attach(p probeSpec) ([]*attach.Link, error) {
	b, err := fa.open(p.target)
	if err != nil {
		return nil, err
	}
	fns, err := resolveFuncs(b, p.fn)
	if err != nil {
		return nil, err
	}
	if v := b.GoVersion(); v != "" && version.IsValid(v) && version.Compare(v, goRegisterABI[b.Machine()]) < 0 {
		fmt.Fprintf(os.Stderr, "probekit trace: warning: %s was built with %s, which passes Go arguments on the stack: the registers printed are not the arguments\n", p.target, v)
	}
	var links []*attach.Link
	for _, fn := range fns {
		l, err := fa.attachOne(b, p, fn)
		if err != nil {
			if len(fns) > 1 && skippable(err) {
				// One function of a glob that cannot take this probe:
				// the others can.
				fmt.Fprintf(os.Stderr, "probekit trace: warning: %s: skipped: %v\n", fn, err)
				continue
			}
			return links, err
		}
		links = append(links, l)
	}
	if len(links) == 0 {
		return nil, fmt.Errorf("%s: none of the %d functions matching %q can be probed", p.target, len(fns), p.fn)
	}
	return links, nil
}

// skippable reports whether err concerns one function only.
func skippable(err error) bool {
	return errors.Is(err, uprobe.ErrAmbiguous) || errors.Is(err, uprobe.ErrNoReturn) || errors.Is(err, uprobe.ErrUncertainSite)
}

// attachOne attaches trace_func to fn's entry, or to its returns.
func (fa *funcAttacher) attachOne(b *uprobe.Binary, p probeSpec, fn uprobe.Function) (*attach.Link, error) {
	regs, strMask := record.RegsC, fa.t.req.strMask
	switch {
	case p.kind == record.KindUretprobe:
		regs, strMask = record.RegsRet, 0
	case b.IsGo() && isGoName(fn.Name):
		regs = record.RegsGo
	}
	index := len(fa.t.sites)
	cookie, err := record.FuncCookie(uint32(index), regs, p.kind, strMask)
	if err != nil {
		return nil, err
	}
	name := funcName(fn)
	opts := &uprobe.Options{PID: fa.pid, Cookie: cookie}
	var l *attach.Link
	if p.kind == record.KindUretprobe {
		// A uretprobe on native code; on Go, where a uretprobe crashes
		// the program, a probe on each return instruction.
		l, err = b.Return(fn.String(), fa.prog, opts)
	} else {
		l, err = b.Entry(fn.String(), fa.prog, opts)
	}
	if err != nil {
		return nil, err
	}
	fa.t.funcSite(p.kind, name, fn.Address)
	return l, nil
}

// resolveFuncs returns the functions FUNC names in b: the one function a
// name (name, name@VERSION, name@@VERSION) resolves to, or those a glob
// matches, one per address (aliases such as malloc and __libc_malloc
// share one probe).
func resolveFuncs(b *uprobe.Binary, fn string) ([]uprobe.Function, error) {
	if !strings.ContainsAny(fn, `*?\`) {
		f, err := b.Function(fn)
		if err != nil {
			return nil, err
		}
		return []uprobe.Function{f}, nil
	}
	all := b.Functions(fn)
	if len(all) == 0 {
		return nil, fmt.Errorf("%s: no function matches %q: %w", b.Path(), fn, uprobe.ErrNotFound)
	}
	// Sorted by address: keep the preferred name of each address.
	var fns []uprobe.Function
	for _, f := range all {
		if n := len(fns); n > 0 && fns[n-1].Address == f.Address {
			if preferName(f, fns[n-1]) {
				fns[n-1] = f
			}
			continue
		}
		fns = append(fns, f)
	}
	// A name bound to several addresses resolves to one of them: probe
	// that one once (Entry and Return resolve by name).
	out := fns[:0]
	for _, f := range fns {
		r, err := b.Function(f.String())
		if err == nil && r.Address != f.Address {
			continue
		}
		out = append(out, f)
	}
	return out, nil
}

// preferName reports whether a names a function better than b: a global
// over a local, a default version over a hidden one, then the shorter
// name (malloc over __libc_malloc).
func preferName(a, b uprobe.Function) bool {
	rank := func(f uprobe.Function) int {
		r := 0
		if f.Global {
			r += 2
		}
		if f.Version == "" || f.DefaultVersion {
			r++
		}
		return r
	}
	if c := cmp.Compare(rank(a), rank(b)); c != 0 {
		return c > 0
	}
	return len(a.Name) < len(b.Name)
}

// isGoName reports whether a function of a Go binary is Go code (a
// package-qualified name, main.add) rather than C linked in by cgo
// (x_cgo_init, malloc).
func isGoName(name string) bool {
	return strings.Contains(name, ".")
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
	s := traceSite{kind: kind}
	label, end := "uprobe", t.form.argsEnd
	if kind == record.KindUretprobe {
		label, end = "uretprobe", t.form.retEnd
	}
	s.end = []byte(end)
	s.label = label + ":" + name
	if t.req.json {
		s.head = append(s.head, `{"kind":"`...)
		s.head = append(s.head, label...)
		s.head = append(s.head, `","function":`...)
		s.head = appendJSON(s.head, name, false)
		s.head = append(s.head, `,"pid":`...)
		s.mid = append(s.mid, `,"address":`...)
		s.mid = strconv.AppendUint(s.mid, addr, 10)
		if kind == record.KindUretprobe {
			s.mid = append(s.mid, `,"ret":`...)
		} else {
			s.mid = append(s.mid, `,"args":[`...)
		}
	} else {
		s.mid = fmt.Appendf(nil, " %s:%s @%#x ", label, name, addr)
		if kind == record.KindUretprobe {
			s.mid = append(s.mid, "= "...)
		} else {
			s.mid = append(s.mid, '[')
		}
	}
	t.sites = append(t.sites, s)
}
