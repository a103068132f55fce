package usdt

// The spec phase: a location's decoded arguments become the record the BPF
// side of usdt.bpf.h reads from __bpf_usdt_specs (struct __bpf_usdt_spec);
// encode.go writes it in the byte layout of the object being attached.

import (
	"debug/elf"
	"fmt"
	"runtime"

	"github.com/probekit/probekit/argspec"
	"github.com/probekit/probekit/internal/safeelf"
)

// maxSpecArgs is BPF_USDT_MAX_ARG_CNT: sys/sdt.h stops at STAP_PROBE12,
// and both libbpf layouts hold 12 argument records.
const maxSpecArgs = 12

// Argument kinds as usdt.bpf.h's enum __bpf_usdt_arg_type numbers them:
// libbpf's four, then probekit's "unavailable", for which bpf_usdt_arg
// returns -EINVAL instead of the whole attach failing.
const (
	argConst       uint8 = 0 // val_off is the value
	argReg         uint8 = 1 // the pt_regs slot at reg_off
	argRegDeref    uint8 = 2 // memory at reg + val_off
	argSIB         uint8 = 3 // memory at reg + (idx << scale_bitshift) + val_off
	argUnavailable uint8 = 4 // cannot be read on this kernel
)

// bpfArg is one argument record (struct __bpf_usdt_arg_spec) before
// encoding.
type bpfArg struct {
	Type       uint8  // argConst ... argUnavailable
	ValOff     uint64 // constant, or displacement as two's complement
	RegOff     int16  // offset of the (base) register in the kernel's pt_regs
	IdxRegOff  uint16 // offset of the SIB index register (12 bits in libbpf 1.7)
	ScaleShift uint8  // log2 of the SIB scale
	Signed     bool   // sign-extend from the argument's size
	BitShift   uint8  // 64 - 8*size
}

// bpfSpec is one struct __bpf_usdt_spec before encoding.
type bpfSpec struct {
	Args   []bpfArg
	Cookie uint64 // what bpf_usdt_cookie returns
}

// argUnavailableError says why one argument of a location cannot be read.
// The location is still attached; the BPF side returns -EINVAL for that
// argument only (libbpf refuses the whole attach).
type argUnavailableError struct {
	Index   int    // 0-based
	Operand string // as written in the note, "" when not known
	Reason  string
}

func (e *argUnavailableError) Error() string {
	if e.Operand == "" {
		return fmt.Sprintf("argument %d unavailable: %s", e.Index+1, e.Reason)
	}
	return fmt.Sprintf("argument %d (%s) unavailable: %s", e.Index+1, e.Operand, e.Reason)
}

// hostMachine is the ELF machine of the running kernel, whose pt_regs the
// BPF program receives. The Go program is assumed to be native (a 32-bit Go
// tracer on a 64-bit kernel would see the wrong pt_regs).
var hostMachine = goarchMachine[runtime.GOARCH]

var goarchMachine = map[string]elf.Machine{
	"amd64":   elf.EM_X86_64,
	"386":     elf.EM_386,
	"arm64":   elf.EM_AARCH64,
	"arm":     elf.EM_ARM,
	"s390x":   elf.EM_S390,
	"riscv64": elf.EM_RISCV,
	"ppc64":   elf.EM_PPC64,
	"ppc64le": elf.EM_PPC64,
	"loong64": elf.EM_LOONGARCH,
}

// pcRegister names the program counter's pt_regs slot on kernels where a
// PC-relative argument is expressed as a read relative to it. Others
// (s390x keeps it in the PSW, ppc64 after the gprs) are not supported.
var pcRegister = map[elf.Machine]string{
	elf.EM_X86_64:  "rip",
	elf.EM_AARCH64: "pc",
	elf.EM_ARM:     "pc",
	elf.EM_RISCV:   "pc",
}

// buildSpec converts the decoded arguments of the location at link-time
// address location (where the uprobe fires) into a spec, for a kernel of
// the host's architecture. sym resolves the symbols of PC-relative
// operands to link-time addresses (symbolResolver). An argument that
// cannot be expressed is marked unavailable, with an error in the result;
// the spec is built anyway.
//
// Decisions:
//   - PC-relative operands (x86-64 "sym+addend(%rip)") become a memory read
//     relative to the probe's instruction pointer: reg_off is the PC's slot
//     and val_off = sym + addend − location. Both addresses are link-time
//     ones of the same file, so the load bias cancels and no PID is needed;
//     it holds because the uprobe's pt_regs IP is the probe address when
//     the program runs (checked by TestKernelIPIsProbeAddress).
//   - i386 binaries on an x86-64 kernel, and 32-bit ARM binaries on an
//     arm64 kernel, are read through the 64-bit pt_regs, where the kernel
//     keeps a compat task's registers; other mismatches (a binary of a
//     foreign architecture) make register and memory operands unavailable.
//   - Float arguments ('f' suffix) are read as their raw IEEE 754 bits,
//     zero-extended whatever the sign flag says: reinterpret the low
//     size bytes of the value (math.Float32frombits, Float64frombits).
//   - Arguments beyond the twelfth cannot be stored: they are reported and
//     dropped.
func buildSpec(machine elf.Machine, location uint64, args []argspec.Arg, sym func(name string) (uint64, bool), cookie uint64) (bpfSpec, []error) {
	return buildSpecFor(hostMachine, machine, location, args, sym, cookie)
}

// buildSpecFor is buildSpec for a kernel of architecture host.
func buildSpecFor(host, machine elf.Machine, location uint64, args []argspec.Arg, sym func(name string) (uint64, bool), cookie uint64) (bpfSpec, []error) {
	var errs []error
	n := len(args)
	if n > maxSpecArgs {
		for i := maxSpecArgs; i < n; i++ {
			errs = append(errs, &argUnavailableError{Index: i, Operand: args[i].Operand,
				Reason: fmt.Sprintf("a USDT probe has at most %d arguments; dropped", maxSpecArgs)})
		}
		n = maxSpecArgs
	}
	s := bpfSpec{Args: make([]bpfArg, n), Cookie: cookie}
	for i := range n {
		a, reason := buildArg(host, machine, location, &args[i], sym)
		if reason != "" {
			a = bpfArg{Type: argUnavailable, BitShift: a.BitShift}
			errs = append(errs, &argUnavailableError{Index: i, Operand: args[i].Operand, Reason: reason})
		}
		s.Args[i] = a
	}
	return s, errs
}

// buildArg converts one argument, or says why it cannot be read.
func buildArg(host, machine elf.Machine, location uint64, a *argspec.Arg, sym func(string) (uint64, bool)) (bpfArg, string) {
	var b bpfArg
	switch a.Size {
	case 1, 2, 4, 8:
		b.BitShift = uint8(64 - 8*a.Size)
	default:
		return b, fmt.Sprintf("size %d is not 1, 2, 4 or 8", a.Size)
	}
	// Floats are raw bits: sign extension would change them.
	b.Signed = a.Signed && !a.Float

	switch a.Kind {
	case argspec.Const:
		b.Type = argConst
		b.ValOff = uint64(a.Value)
	case argspec.Reg, argspec.Mem:
		off, err := hostRegister(host, machine, a.Reg)
		if err != "" {
			return b, err
		}
		b.Type, b.RegOff = argReg, off
		if a.Kind == argspec.Mem {
			b.Type, b.ValOff = argRegDeref, uint64(a.Offset)
		}
	case argspec.SIB:
		base, err := hostRegister(host, machine, a.Reg)
		if err != "" {
			return b, err
		}
		idx, err := hostRegister(host, machine, a.Index)
		if err != "" {
			return b, err
		}
		shift, ok := scaleShift(a.Scale)
		if !ok {
			return b, fmt.Sprintf("scale %d is not 1, 2, 4 or 8", a.Scale)
		}
		b.Type, b.RegOff, b.IdxRegOff, b.ScaleShift, b.ValOff = argSIB, base, uint16(idx), shift, uint64(a.Offset)
	case argspec.PCRel:
		if a.Symbol == "" {
			return b, "PC-relative operand without a symbol: its base is an instruction the probe site does not have"
		}
		name, ok := pcRegister[host]
		if !ok {
			return b, fmt.Sprintf("PC-relative operands are not supported on a %v kernel", host)
		}
		if machine != host && !(machine == elf.EM_386 && host == elf.EM_X86_64) && !(machine == elf.EM_ARM && host == elf.EM_AARCH64) {
			return b, fmt.Sprintf("a binary for %v does not run natively on a kernel for %v", machine, host)
		}
		pc, ok := argspec.RegisterOffset(host, name)
		if !ok {
			return b, fmt.Sprintf("no program counter slot known for %v", host)
		}
		addr, ok := sym(a.Symbol)
		if !ok {
			return b, fmt.Sprintf("symbol %q not found, or defined more than once with different addresses, in the file's symbol tables", a.Symbol)
		}
		// Runtime address = runtime IP + (sym + addend − location): the
		// load bias is in both runtime terms and cancels.
		b.Type, b.RegOff, b.ValOff = argRegDeref, int16(pc), addr+uint64(a.Offset)-location
	case argspec.Unsupported:
		reason := a.Reason
		if reason == "" {
			reason = "operand not readable from BPF"
		}
		return b, reason
	default:
		return b, fmt.Sprintf("unknown operand kind %v", a.Kind)
	}
	return b, ""
}

// scaleShift is log2 of a SIB scale.
func scaleShift(scale int) (uint8, bool) {
	switch scale {
	case 1:
		return 0, true
	case 2:
		return 1, true
	case 4:
		return 2, true
	case 8:
		return 3, true
	}
	return 0, false
}

// maxRegOff bounds a pt_regs offset: reg_off is a C short.
const maxRegOff = 1<<15 - 1

// hostRegister returns the offset of r, a register of a machine binary,
// in the pt_regs of a host kernel, or why there is none.
func hostRegister(host, machine elf.Machine, r argspec.Register) (int16, string) {
	off := int(r.Offset)
	switch {
	case machine == host:
	case machine == elf.EM_386 && host == elf.EM_X86_64:
		// A compat task's registers sit in the 64-bit pt_regs.
		r64, ok := argspec.I386ToX8664(r)
		if !ok {
			return 0, fmt.Sprintf("register %s has no slot in the x86-64 pt_regs", r.Name)
		}
		off = int(r64.Offset)
	case machine == elf.EM_ARM && host == elf.EM_AARCH64:
		// arm64 keeps compat r0-r14 in regs[0-14] and the compat PC in pc
		// (arch/arm64/include/asm/ptrace.h, compat_* macros); the 32-bit
		// pt_regs has 4-byte uregs[] slots in the same order.
		n := off / 4
		switch {
		case off%4 != 0 || n > 15:
			return 0, fmt.Sprintf("register %s has no slot in the arm64 pt_regs", r.Name)
		case n == 15:
			off = 256
		default:
			off = 8 * n
		}
	default:
		return 0, fmt.Sprintf("a binary for %v does not run natively on a kernel for %v", machine, host)
	}
	if off > maxRegOff {
		return 0, fmt.Sprintf("register %s: pt_regs offset %d does not fit", r.Name, off)
	}
	return int16(off), ""
}

// symbolResolver returns the link-time address of a symbol defined in f's
// .symtab or .dynsym, for PC-relative arguments ("-4@counter(%rip)").
// Undefined, absolute, common, TLS, section and file symbols are left out:
// none is an address relative to the file's load base. A name defined more
// than once with different addresses (two static variables of the same
// name in different units, libbpf/usdt#13) resolves to nothing rather
// than to a guess. A table that cannot be read resolves nothing.
func symbolResolver(f *safeelf.File) func(string) (uint64, bool) {
	var tables []*safeelf.Symbols
	for _, read := range []func() (*safeelf.Symbols, error){f.Symbols, f.DynamicSymbols} {
		if t, err := read(); err == nil {
			tables = append(tables, t)
		}
	}
	return func(name string) (addr uint64, ok bool) {
		ambiguous := false
		for _, t := range tables {
			t.Lookup(name, func(i int) bool {
				s := t.Symbol(i)
				switch {
				case s.Section == elf.SHN_UNDEF, s.Section == elf.SHN_ABS, s.Section == elf.SHN_COMMON,
					s.Type == elf.STT_TLS, s.Type == elf.STT_SECTION, s.Type == elf.STT_FILE:
					return true
				}
				if ok && addr != s.Value {
					ambiguous = true
					return false
				}
				addr, ok = s.Value, true
				return true
			})
		}
		if ambiguous {
			return 0, false
		}
		return addr, ok
	}
}
