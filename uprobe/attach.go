package uprobe

import (
	"debug/elf"
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"golang.org/x/sys/unix"

	"github.com/probekit/probekit/attach"
	"github.com/probekit/probekit/internal/features"
)

// Options are the parameters of Entry, Return and Uretprobe. The zero
// value (or a nil pointer) is the default.
type Options struct {
	// PID limits the probe to one process (in the caller's PID
	// namespace). 0 means the PID given to OpenProcess, or every process
	// that maps the file for a Binary from Open.
	PID int

	// Cookie is a value the BPF program reads with
	// bpf_get_attach_cookie(), the same for every site of the probe
	// (Linux 5.15; a non-zero cookie fails with ebpf.ErrNotSupported on
	// older kernels).
	Cookie uint64

	// FunctionCookie, when set, gives each function its own cookie
	// (overriding Cookie), for Entries and Returns over many functions.
	FunctionCookie func(fn Function) uint64

	// AddressTable, when set, is where the BPF program finds each site's
	// cookie on a kernel without BPF cookies (before Linux 5.15): a hash
	// map from AddressKey to the cookie (a uint64), such as
	// record.Objects.FuncIPs. The sites' entries are written before the
	// probes are placed and deleted when the link closes. A
	// position-independent file (PIE executable, shared library) runs at
	// other addresses in each process, so there it needs a PID whose
	// process maps the file already; a non-PIE executable is keyed for
	// every process. A uretprobe's address is the caller's, so Returns
	// puts its probes on the return instructions instead, on native code
	// too (as with ReturnSites), and Uretprobe is refused. With cookies
	// the table is not used.
	AddressTable *ebpf.Map

	// FunctionStart puts an entry probe on a Go function's first
	// instruction. By default it goes right after the function's stack
	// check (see prologue.go), so that it fires once per call: at the
	// first instruction it fires again each time runtime.morestack grows
	// the stack or preempts the goroutine and restarts the function. The
	// arguments are in their registers at both places. No effect on
	// native code, or on Go functions without a stack check.
	FunctionStart bool

	// Offset is added to the function's start for an entry probe: a
	// probe inside the function. It must fall on an instruction boundary
	// found by decoding from the function's start (a breakpoint in the
	// middle of an instruction corrupts the target). Not valid for return
	// probes.
	Offset uint64

	// AllowUretprobeOnGo lets Uretprobe put a kernel uretprobe on a Go
	// binary. The Go runtime crashes ("unexpected return pc") when it
	// walks or copies a stack whose return address the kernel replaced,
	// which happens on the next stack growth, panic or GC stack scan of
	// a goroutine inside the function. Only for experiments.
	AllowUretprobeOnGo bool

	// ReturnSites makes Return use a uprobe on each return instruction on
	// native code too, instead of a uretprobe. Useful on x86-64 kernels
	// 6.11+, whose uretprobe trampoline calls the uretprobe() syscall: a
	// process whose seccomp filter does not allow it is killed with
	// SIGSYS (systemd/systemd#34615). Tail calls and longjmp escape such
	// probes.
	ReturnSites bool

	// Skip, when set, makes Entries and Returns leave out each function
	// that cannot take the probe instead of failing the call, and calls
	// Skip with the function and the reason: ErrNoReturn or
	// ErrUncertainSite for return sites, ErrKernelRefused for a site the
	// kernel will not probe (x86-64 refuses instructions with a lock
	// prefix, for one: arch_uprobe_analyze_insn). Those are found by
	// attaching halves of the set until each refused function stands
	// alone, so a few among thousands cost a few dozen attempts. The call
	// fails only when no function is left.
	Skip func(fn Function, err error)
}

// Prepare readies spec before it is loaded: it is attach.Prepare, the
// same call as usdt.Prepare. Programs in "uprobe" and "uretprobe" sections
// (and those named in programs) get the attach type of the links this
// kernel gets: uprobe_multi where the kernel has it with its PID-filter
// fix, perf-event uprobes elsewhere. Nothing is carried from here to
// Entry, Return or Uretprobe: a program loaded without Prepare on a kernel
// with uprobe_multi is refused with ErrNotPrepared.
func Prepare(spec *ebpf.CollectionSpec, programs ...string) error {
	return attach.Prepare(spec, programs...)
}

// ErrNotPrepared indicates the program was loaded without Prepare.
var ErrNotPrepared = attach.ErrNotPrepared

// Link is an attached function probe: one uprobe_multi link, or one
// perf-event link per site. It is the link type of package usdt too.
type Link = attach.Link

// probe is one attach request after symbol resolution.
type probe struct {
	fn      Function
	offsets []uint64 // file offsets
	ret     bool     // a kernel uretprobe
	what    string   // "entry", "return site", "uretprobe" for messages
}

// Entry attaches prog at the entry of function sym (or at Options.Offset
// inside it). sym is a name, name@VERSION or name@@VERSION. On a Go
// function the entry is after its stack check (Options.FunctionStart), so
// the probe fires once per call.
func (b *Binary) Entry(sym string, prog *ebpf.Program, opts *Options) (*Link, error) {
	o := optionsOrDefault(opts)
	fn, err := b.Function(sym)
	if err != nil {
		return nil, err
	}
	p, err := b.entryProbe(fn, o)
	if err != nil {
		return nil, err
	}
	return b.attach([]probe{p}, prog, o)
}

// Entries attaches prog at the entry of every function of fns (as
// Functions lists them) through one attachment: one uprobe_multi link for
// all of them where the kernel has it, so that a glob over thousands of
// functions attaches and detaches at once. Options.FunctionCookie gives
// each function its cookie. Options.Offset is not allowed. All or
// nothing: one function that cannot be probed fails the call.
func (b *Binary) Entries(fns []Function, prog *ebpf.Program, opts *Options) (*Link, error) {
	o := optionsOrDefault(opts)
	if o.Offset != 0 {
		return nil, fmt.Errorf("uprobe: %s: Options.Offset names a place in one function, not in %d", b.display, len(fns))
	}
	ps := make([]probe, 0, len(fns))
	for _, fn := range fns {
		p, err := b.entryProbe(fn, o)
		if err != nil {
			if o.Skip != nil && errors.Is(err, ErrUncertainSite) {
				o.Skip(fn, err)
				continue
			}
			return nil, err
		}
		ps = append(ps, p)
	}
	return b.attachMany(ps, prog, o)
}

// entryProbe places an entry probe on fn: at Options.Offset inside it, or
// after a Go function's stack check, or at its first instruction.
func (b *Binary) entryProbe(fn Function, o Options) (probe, error) {
	off := fn.Offset
	switch {
	case o.Offset != 0:
		var err error
		if off, err = b.insideOffset(fn, o.Offset); err != nil {
			return probe{}, err
		}
	case b.IsGo() && !o.FunctionStart && fn.Size != 0:
		code, err := b.readCode(fn.Offset, min(fn.Size, maxPrologueBytes))
		if err != nil {
			return probe{}, err
		}
		off += goStackCheckEnd(b.machine, code)
	}
	return probe{fn: fn, offsets: []uint64{off}, what: "entry"}, nil
}

// Return attaches prog so that it runs when function sym returns, with
// the return value in the return registers. On a Go binary (and with
// Options.ReturnSites) that is a uprobe on each return instruction of the
// function, run before the instruction, with the caller's frame not yet
// restored; elsewhere a kernel uretprobe. It refuses a function whose
// return sites are uncertain (see ReturnSites) or that has none.
func (b *Binary) Return(sym string, prog *ebpf.Program, opts *Options) (*Link, error) {
	o := optionsOrDefault(opts)
	if o.Offset != 0 {
		return nil, fmt.Errorf("uprobe: %s: return probe on %q: Options.Offset applies to entry probes only", b.display, sym)
	}
	fn, err := b.Function(sym)
	if err != nil {
		return nil, err
	}
	p, err := b.returnProbe(fn, o)
	if err != nil {
		return nil, err
	}
	return b.attach([]probe{p}, prog, o)
}

// Returns is Return for every function of fns through one attachment, as
// Entries is for entries. On a Go binary every function must have certain
// return sites.
func (b *Binary) Returns(fns []Function, prog *ebpf.Program, opts *Options) (*Link, error) {
	o := optionsOrDefault(opts)
	if o.Offset != 0 {
		return nil, fmt.Errorf("uprobe: %s: return probes: Options.Offset applies to entry probes only", b.display)
	}
	ps := make([]probe, 0, len(fns))
	for _, fn := range fns {
		p, err := b.returnProbe(fn, o)
		if err != nil {
			if o.Skip != nil && (errors.Is(err, ErrUncertainSite) || errors.Is(err, ErrNoReturn)) {
				o.Skip(fn, err)
				continue
			}
			return nil, err
		}
		ps = append(ps, p)
	}
	return b.attachMany(ps, prog, o)
}

// attachMany attaches ps as one attachment. With Options.Skip, a refusal
// by the kernel is narrowed down to the functions it concerns, which are
// skipped, and the others attached as one.
func (b *Binary) attachMany(ps []probe, prog *ebpf.Program, o Options) (*Link, error) {
	if len(ps) == 0 {
		return nil, fmt.Errorf("uprobe: %s: no function left to probe", b.display)
	}
	l, err := b.attach(ps, prog, o)
	if err == nil || o.Skip == nil || !kernelRefused(err) {
		return l, err
	}
	refused := map[uint64]bool{}
	if err := b.findRefused(ps, prog, o, refused); err != nil {
		return nil, err
	}
	good := ps[:0:0]
	for _, p := range ps {
		if refused[p.fn.Address] {
			o.Skip(p.fn, fmt.Errorf("uprobe: %s: %s: %w", b.display, p.fn, ErrKernelRefused))
			continue
		}
		good = append(good, p)
	}
	if len(good) == 0 {
		return nil, fmt.Errorf("uprobe: %s: the kernel refused every one of %d functions: %w", b.display, len(ps), ErrKernelRefused)
	}
	return b.attach(good, prog, o)
}

// findRefused marks in refused the functions of ps whose sites the kernel
// refuses, attaching ps having failed with a refusal.
func (b *Binary) findRefused(ps []probe, prog *ebpf.Program, o Options, refused map[uint64]bool) error {
	if len(ps) == 1 {
		refused[ps[0].fn.Address] = true
		return nil
	}
	for _, half := range [][]probe{ps[:len(ps)/2], ps[len(ps)/2:]} {
		l, err := b.attach(half, prog, o)
		if err == nil {
			l.Close()
			continue
		}
		if !kernelRefused(err) {
			return err
		}
		if err := b.findRefused(half, prog, o, refused); err != nil {
			return err
		}
	}
	return nil
}

// kernelRefused reports whether err is the kernel refusing a site:
// EOPNOTSUPP, or ENOTSUPP (524), which uprobe registration can pass on.
func kernelRefused(err error) bool {
	return errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.Errno(524))
}

// returnProbe is a kernel uretprobe on native code, RET-site uprobes on
// Go (and with Options.ReturnSites).
func (b *Binary) returnProbe(fn Function, o Options) (probe, error) {
	table, err := useTable(o)
	if err != nil {
		return probe{}, err
	}
	if !b.IsGo() && !o.ReturnSites && !table {
		return probe{fn: fn, offsets: []uint64{fn.Offset}, ret: true, what: "uretprobe"}, nil
	}
	offs, err := b.returnOffsets(fn)
	if err != nil {
		return probe{}, err
	}
	return probe{fn: fn, offsets: offs, what: "return site"}, nil
}

// Uretprobe attaches prog as a kernel uretprobe on function sym. On a Go
// binary it fails with ErrGoUretprobe unless Options.AllowUretprobeOnGo is
// set; Return is the safe choice there.
func (b *Binary) Uretprobe(sym string, prog *ebpf.Program, opts *Options) (*Link, error) {
	o := optionsOrDefault(opts)
	if b.IsGo() && !o.AllowUretprobeOnGo {
		return nil, fmt.Errorf("uprobe: %s (%s): uretprobe on %q: %w (use Return for RET-site probes, or set Options.AllowUretprobeOnGo)",
			b.display, b.goVersion, sym, ErrGoUretprobe)
	}
	if o.Offset != 0 {
		return nil, fmt.Errorf("uprobe: %s: uretprobe on %q: Options.Offset applies to entry probes only", b.display, sym)
	}
	if table, err := useTable(o); err != nil {
		return nil, err
	} else if table {
		return nil, fmt.Errorf("uprobe: %s: uretprobe on %q: its program sees the caller's return address, which Options.AddressTable cannot map to the function (%w): use Return",
			b.display, sym, features.Check(features.Cookie))
	}
	fn, err := b.Function(sym)
	if err != nil {
		return nil, err
	}
	return b.attach([]probe{{fn: fn, offsets: []uint64{fn.Offset}, ret: true, what: "uretprobe"}}, prog, o)
}

// ReturnSites decodes fn (a function of b) and lists its exits.
func (b *Binary) ReturnSites(fn Function) (*Scan, error) {
	if fn.Size == 0 {
		return nil, fmt.Errorf("uprobe: %s: function %s has no size in %s, its return sites cannot be found", b.display, fn, fn.Source)
	}
	if _, ok := b.fileOffset(fn.Address + fn.Size - 1); !ok {
		return nil, fmt.Errorf("uprobe: %s: function %s [%#x, %#x) runs past its executable segment", b.display, fn, fn.Address, fn.Address+fn.Size)
	}
	code, err := b.readCode(fn.Offset, fn.Size)
	if err != nil {
		return nil, err
	}
	return ReturnSites(b.machine, code)
}

// returnOffsets returns the file offsets of fn's return instructions,
// refusing uncertain ones.
func (b *Binary) returnOffsets(fn Function) ([]uint64, error) {
	scan, err := b.ReturnSites(fn)
	if err != nil {
		return nil, err
	}
	rel, certain := scan.Returns()
	if !certain {
		return nil, fmt.Errorf("uprobe: %s: function %s: %w: %d undecodable byte run(s) precede return instructions (first at +%#x); no return probe was attached",
			b.display, fn, ErrUncertainSite, len(scan.Gaps), scan.Gaps[0].Offset)
	}
	if len(rel) == 0 {
		return nil, fmt.Errorf("uprobe: %s: function %s: %w (%d tail call or indirect jump site(s))", b.display, fn, ErrNoReturn, len(scan.Sites))
	}
	offs := make([]uint64, len(rel))
	for i, r := range rel {
		offs[i] = fn.Offset + r // sites are relative to the function's first byte
	}
	return offs, nil
}

// insideOffset validates an offset into fn and returns its file offset.
func (b *Binary) insideOffset(fn Function, rel uint64) (uint64, error) {
	if fn.Size != 0 && rel >= fn.Size {
		return 0, fmt.Errorf("uprobe: %s: offset %#x is outside function %s (size %#x)", b.display, rel, fn, fn.Size)
	}
	if _, ok := b.fileOffset(fn.Address + rel); !ok {
		return 0, fmt.Errorf("uprobe: %s: %s+%#x is outside the executable segments", b.display, fn, rel)
	}
	if fn.Size == 0 {
		return 0, fmt.Errorf("uprobe: %s: function %s has no size, so offset %#x cannot be checked for an instruction boundary", b.display, fn, rel)
	}
	code, err := b.readCode(fn.Offset, fn.Size)
	if err != nil {
		return 0, err
	}
	if !instructionBoundary(b.machine, code, rel) {
		return 0, fmt.Errorf("uprobe: %s: %s+%#x: %w (decoding from the function's start does not reach it cleanly)", b.display, fn, rel, ErrUncertainSite)
	}
	return fn.Offset + rel, nil
}

func optionsOrDefault(o *Options) Options {
	if o == nil {
		return Options{}
	}
	return *o
}

// attach is the one implementation behind Entry, Return, Uretprobe and
// their many-function forms: every site of every probe in one
// attach.File, so the core makes one uprobe_multi link of them (or one
// perf-event link per site), all-or-nothing. The probes are all
// uretprobes or all uprobes.
func (b *Binary) attach(ps []probe, prog *ebpf.Program, o Options) (*Link, error) {
	if len(ps) == 0 {
		return nil, fmt.Errorf("uprobe: %s: no function to probe", b.display)
	}
	first := ps[0]
	if prog == nil {
		return nil, fmt.Errorf("uprobe: %s: %s probe on %s: nil program", b.display, first.what, first.fn)
	}
	if b.closed.Load() {
		return nil, fmt.Errorf("uprobe: %s: %s probe on %s: the Binary is closed", b.display, first.what, first.fn)
	}
	if err := attach.CheckMachine(b.display, b.machine, b.file.ByteOrder); err != nil {
		return nil, fmt.Errorf("uprobe: %w", err)
	}
	pid := o.PID
	if pid == 0 {
		pid = b.pid
	}
	if pid < 0 {
		return nil, fmt.Errorf("uprobe: %s: invalid PID %d", b.display, pid)
	}
	table, err := useTable(o)
	if err != nil {
		return nil, err
	}
	if table && first.ret {
		return nil, fmt.Errorf("uprobe: %s: uretprobe on %s: Options.AddressTable cannot map a return address to its function (%w)", b.display, first.fn, features.Check(features.Cookie))
	}
	var keys []AddressKey
	var cookies []uint64
	if table {
		if keys, err = b.tableKeys(ps, pid); err != nil {
			return nil, err
		}
	}
	file := attach.File{Path: b.path, Name: b.display}
	for _, p := range ps {
		if p.ret != first.ret {
			return nil, fmt.Errorf("uprobe: %s: uretprobes and uprobes in one attachment", b.display)
		}
		cookie := o.Cookie
		if o.FunctionCookie != nil {
			cookie = o.FunctionCookie(p.fn)
		}
		for _, off := range p.offsets {
			if b.machine == elf.EM_AARCH64 && off%4 != 0 {
				return nil, fmt.Errorf("uprobe: %s: %s probe on %s: file offset %#x is not 4-aligned", b.display, p.what, p.fn, off)
			}
			site := attach.Site{Probe: p.what + " of " + p.fn.String(), Offset: off, Cookie: cookie}
			if table {
				// The cookie goes in the table, keyed as the program
				// will look it up.
				cookies = append(cookies, cookie)
				site.Cookie = 0
			}
			file.Sites = append(file.Sites, site)
		}
	}
	release := func() error { return nil }
	if table {
		if release, err = addToTable(o.AddressTable, keys, cookies); err != nil {
			return nil, fmt.Errorf("uprobe: %s: %w", b.display, err)
		}
	}
	l, err := attach.Attach(prog, []attach.File{file}, &attach.Options{PID: pid, Return: first.ret})
	if err != nil {
		return nil, errors.Join(fmt.Errorf("uprobe: %w", err), release())
	}
	l.OnClose(release)
	return l, nil
}
