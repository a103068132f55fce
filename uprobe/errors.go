package uprobe

import "errors"

var (
	// ErrNotFound: no function of that name (or matching that glob) in the
	// binary. Wrapped with the symbol and the file.
	ErrNotFound = errors.New("not found")

	// ErrNotFunction: the symbol exists but is not a function (an object,
	// a TLS variable, an IFUNC resolver), so a uprobe on it would fire on
	// the wrong code or never.
	ErrNotFunction = errors.New("symbol is not a function")

	// ErrAmbiguous: a name resolves to functions at several addresses
	// (static functions of the same name in several files) and no rule
	// (default version, global binding) picks one.
	ErrAmbiguous = errors.New("ambiguous symbol")

	// ErrGoUretprobe: a kernel uretprobe was asked for on a Go binary,
	// where it crashes the program when the runtime moves a stack. Use
	// Return (RET-site probes) or set Options.AllowUretprobeOnGo.
	ErrGoUretprobe = errors.New("uretprobe on a Go binary crashes it")

	// ErrUncertainSite: a return site or offset lies after bytes the
	// decoder could not read, so it may not be an instruction boundary;
	// a breakpoint there could crash the target.
	ErrUncertainSite = errors.New("probe site is not a known instruction boundary")

	// ErrNoReturn: the function has no RET instruction to probe (it only
	// tail-calls or never returns).
	ErrNoReturn = errors.New("function has no return instruction")

	// ErrStackArgs: the program passes function arguments on the stack
	// (i386, arm), not in the registers a BPF program reads.
	ErrStackArgs = errors.New("arguments are passed on the stack, not in registers")

	// ErrKernelRefused: the kernel refused a probe at the function's
	// site (an instruction uprobes cannot single-step or emulate).
	ErrKernelRefused = errors.New("the kernel cannot probe this site")
)
