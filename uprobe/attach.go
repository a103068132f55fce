package uprobe

import (
	"debug/elf"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/probekit/probekit/attach"
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

// ErrNotPrepared: the program was loaded without Prepare.
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
	off := fn.Offset
	switch {
	case o.Offset != 0:
		if off, err = b.insideOffset(fn, o.Offset); err != nil {
			return nil, err
		}
	case b.IsGo() && !o.FunctionStart && fn.Size != 0:
		code, err := b.readCode(fn.Offset, min(fn.Size, maxPrologueBytes))
		if err != nil {
			return nil, err
		}
		off += goStackCheckEnd(b.machine, code)
	}
	return b.attach(probe{fn: fn, offsets: []uint64{off}, what: "entry"}, prog, o)
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
	if !b.IsGo() && !o.ReturnSites {
		return b.attach(probe{fn: fn, offsets: []uint64{fn.Offset}, ret: true, what: "uretprobe"}, prog, o)
	}
	offs, err := b.returnOffsets(fn)
	if err != nil {
		return nil, err
	}
	return b.attach(probe{fn: fn, offsets: offs, what: "return site"}, prog, o)
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
	fn, err := b.Function(sym)
	if err != nil {
		return nil, err
	}
	return b.attach(probe{fn: fn, offsets: []uint64{fn.Offset}, ret: true, what: "uretprobe"}, prog, o)
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

// attach is the one implementation behind Entry, Return and Uretprobe;
// the attach core makes it all-or-nothing.
func (b *Binary) attach(p probe, prog *ebpf.Program, o Options) (*Link, error) {
	if prog == nil {
		return nil, fmt.Errorf("uprobe: %s: %s probe on %s: nil program", b.display, p.what, p.fn)
	}
	if b.closed.Load() {
		return nil, fmt.Errorf("uprobe: %s: %s probe on %s: the Binary is closed", b.display, p.what, p.fn)
	}
	if err := attach.CheckMachine(b.display, b.machine, b.file.ByteOrder); err != nil {
		return nil, fmt.Errorf("uprobe: %w", err)
	}
	if b.machine == elf.EM_AARCH64 {
		for _, off := range p.offsets {
			if off%4 != 0 {
				return nil, fmt.Errorf("uprobe: %s: %s probe on %s: file offset %#x is not 4-aligned", b.display, p.what, p.fn, off)
			}
		}
	}
	pid := o.PID
	if pid == 0 {
		pid = b.pid
	}
	if pid < 0 {
		return nil, fmt.Errorf("uprobe: %s: invalid PID %d", b.display, pid)
	}
	file := attach.File{Path: b.path, Name: b.display}
	for _, off := range p.offsets {
		file.Sites = append(file.Sites, attach.Site{Probe: p.what + " of " + p.fn.String(), Offset: off, Cookie: o.Cookie})
	}
	l, err := attach.Attach(prog, []attach.File{file}, &attach.Options{PID: pid, Return: p.ret})
	if err != nil {
		return nil, fmt.Errorf("uprobe: %w", err)
	}
	return l, nil
}
