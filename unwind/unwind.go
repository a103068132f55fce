package unwind

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
)

// MaxFrames bounds one unwind: the kernel's default
// kernel.perf_event_max_stack, as bpf_get_stack's walks.
const MaxFrames = 127

// ErrOutsideStack: a rule reads memory outside the copied stack.
var ErrOutsideStack = errors.New("read outside the copied stack")

// Regs are the registers an unwind starts from and tracks, by DWARF
// column: on x86-64 RegRSP, RegRBP and RegRA for the instruction
// pointer; on arm64 RegSP, RegX29, RegX30 (the link register) and RegPC.
type Regs struct {
	v     [maxRegister + 1]uint64
	known uint64
}

// arch is what the walk needs to know of a machine's registers.
type arch struct {
	pc, sp, fp, ra int
	// raKept: an unspecified rule keeps the return-address column's
	// value (arm64's link register at a function's entry, before any
	// store); on x86-64 the column is the return address in memory,
	// which every CIE gives a rule for.
	raKept bool
	// addrMask clears what is not address in a return address: arm64's
	// pointer-authentication signature and top-byte tag above the
	// 48-bit user address space (4- and 64-KiB pages without
	// 52-bit addresses).
	addrMask uint64
}

var (
	archX86 = arch{pc: RegRA, sp: RegRSP, fp: RegRBP, ra: RegRA, addrMask: ^uint64(0)}
	archA64 = arch{pc: RegPC, sp: RegSP, fp: RegX29, ra: RegX30, raKept: true, addrMask: 1<<48 - 1}
)

func archOf(m elf.Machine) *arch {
	switch m {
	case elf.EM_X86_64:
		return &archX86
	case elf.EM_AARCH64:
		return &archA64
	}
	return nil
}

// Set records register column reg's value.
func (r *Regs) Set(reg int, v uint64) {
	if reg >= 0 && reg <= maxRegister {
		r.v[reg] = v
		r.known |= 1 << uint(reg)
	}
}

// Get returns register column reg's value, if known.
func (r *Regs) Get(reg uint64) (uint64, bool) {
	if reg > maxRegister || r.known&(1<<reg) == 0 {
		return 0, false
	}
	return r.v[reg], true
}

// Memory is what an unwind may read: the copy of the stack.
type Memory interface {
	ReadUint64(addr uint64) (uint64, bool)
}

// StackCopy is the top of a user stack as the BPF side copied it:
// Data holds the bytes at addresses [Addr, Addr+len(Data)).
type StackCopy struct {
	Addr uint64
	Data []byte
}

// ReadUint64 reads the 8 bytes at addr if the copy holds them.
func (s StackCopy) ReadUint64(addr uint64) (uint64, bool) {
	if addr < s.Addr || addr-s.Addr > uint64(len(s.Data)) || uint64(len(s.Data))-(addr-s.Addr) < 8 {
		return 0, false
	}
	return binary.LittleEndian.Uint64(s.Data[addr-s.Addr:]), true
}

// Objects finds the CFI of the object mapped at a runtime address: its
// table (nil for an object without CFI) and the bias added to its
// link-time addresses (runtime = link-time + bias). ok is false for an
// address in no file-backed executable mapping (JIT code, the end of
// the stack).
type Objects interface {
	Lookup(pc uint64) (t *Table, bias uint64, ok bool)
}

// Stop says why an unwind ended.
type Stop uint8

const (
	// stopNone: the walk goes on (never in a Result).
	stopNone Stop = iota
	// StopOutermost: the CFI marks the frame outermost (the return
	// address is undefined: _start, a thread's start), or the return
	// address is 0.
	StopOutermost
	// StopUnmapped: an address in no executable mapping.
	StopUnmapped
	// StopOutsideStack: the next frame lies beyond the copied stack.
	StopOutsideStack
	// StopUnsupported: a rule this package does not compute.
	StopUnsupported
	// StopNoProgress: the stack pointer did not grow (a corrupt frame).
	StopNoProgress
	// StopDepth: MaxFrames reached.
	StopDepth
	// StopNoFDE: the object has CFI but none for the address, and no
	// frame pointer to fall back on.
	StopNoFDE
)

var stopNames = [...]string{"none", "outermost frame", "unmapped address", "outside the copied stack", "unsupported rule", "stack pointer did not grow", "depth limit", "no FDE"}

func (s Stop) String() string {
	if int(s) < len(stopNames) {
		return stopNames[s]
	}
	return fmt.Sprintf("Stop(%d)", s)
}

// Result is one unwound stack.
type Result struct {
	// Frames are innermost first: the instruction pointer, then a
	// return address per caller (runtime addresses, as
	// bpf.Stack holds them).
	Frames []uint64
	// ByFramePointer counts the frames recovered through rbp, for
	// objects without CFI.
	ByFramePointer int
	Stop           Stop
	// Err is the error behind StopUnsupported or StopNoFDE.
	Err error
}

// Unwind walks an x86-64 stack from regs (rip in RegRA, rsp, rbp)
// through mem, with each object's CFI, falling back to the
// frame-pointer chain (saved rbp at rbp, return address at rbp+8) for
// objects without CFI. UnwindMachine walks another machine's.
//
// The first frame is looked up at its own address, later ones at the
// return address minus 1 (the call instruction: a call may be the last
// instruction of a function), except after a signal frame ("S"
// augmentation), whose next address is the interrupted instruction
// itself. A signal frame's rules read the caller's registers from the
// sigcontext on the stack, so a copy that holds the signal frame
// unwinds through it; glibc's __restore_rt has such rules.
func Unwind(regs Regs, mem Memory, objs Objects) Result {
	return unwind(&archX86, regs, mem, objs, false)
}

// UnwindMachine is Unwind for code of machine m: elf.EM_X86_64, or
// elf.EM_AARCH64 with the pc in RegPC, sp in RegSP, x29 and x30 (the
// link register, which holds the return address until a prologue
// stores it). On arm64 the frame-pointer fallback reads the frame
// record at x29 (x29 then x30) and return addresses lose their
// pointer-authentication bits. Another machine ends at once with
// StopUnsupported.
func UnwindMachine(m elf.Machine, regs Regs, mem Memory, objs Objects) Result {
	a := archOf(m)
	if a == nil {
		return Result{Stop: StopUnsupported, Err: fmt.Errorf("%v: %w", m, ErrUnsupported)}
	}
	return unwind(a, regs, mem, objs, false)
}

func unwind(a *arch, regs Regs, mem Memory, objs Objects, atEntry bool) Result {
	var res Result
	pc, ok := regs.Get(uint64(a.pc))
	if !ok {
		res.Stop = StopUnmapped
		return res
	}
	exact := true
	var row Row
	for {
		res.Frames = append(res.Frames, pc)
		if len(res.Frames) >= MaxFrames {
			res.Stop = StopDepth
			return res
		}
		t, bias, mapped := objs.Lookup(pc)
		if !mapped {
			res.Stop = StopUnmapped
			return res
		}
		look := pc
		if !exact {
			look--
		}
		sp, _ := regs.Get(uint64(a.sp))
		var next Regs
		var stop Stop
		var err error
		var signal bool
		if t != nil {
			err = t.find(look-bias, &row)
			switch {
			case err == nil:
				next, stop, err = step(a, t, &row, &regs, mem)
				signal = row.Signal
			case errors.Is(err, ErrNoFDE) && atEntry && len(res.Frames) == 1:
				next, stop = entry(a, &regs, mem)
			case errors.Is(err, ErrNoFDE):
				next, stop = framePointer(a, &regs, mem)
				if stop == StopOutsideStack {
					stop = StopNoFDE
				}
				res.ByFramePointer++
			default:
				stop = StopUnsupported
			}
		} else if atEntry && len(res.Frames) == 1 {
			next, stop = entry(a, &regs, mem)
		} else {
			next, stop = framePointer(a, &regs, mem)
			res.ByFramePointer++
		}
		if stop != stopNone {
			res.Stop, res.Err = stop, err
			return res
		}
		ra, _ := next.Get(uint64(a.ra))
		ra &= a.addrMask
		nsp, _ := next.Get(uint64(a.sp))
		if ra == 0 {
			res.Stop = StopOutermost
			return res
		}
		// A call grows the stack on x86-64; on arm64 it leaves sp
		// alone, so a function that has not moved sp (a leaf, or any
		// at its entry) has its caller's sp while x30 is live.
		_, lrLive := regs.Get(uint64(a.ra))
		lrLive = lrLive && a.pc != a.ra
		if (nsp < sp || nsp == sp && !lrLive) && !signal {
			res.Stop = StopNoProgress
			return res
		}
		// On arm64 the pc column takes the return address, and the
		// caller's link register is forgotten: a caller that made a
		// call has stored its own, and its CFI says where. Only the
		// innermost frame, or one a signal interrupted (whose
		// trampoline's rules restore x30), runs with a live x30.
		if a.pc != a.ra && !signal {
			next.known &^= 1 << uint(a.ra)
		}
		next.Set(a.pc, ra)
		regs, pc, exact = next, ra, signal
	}
}

// step computes the caller's registers from row. It returns a non-zero
// Stop, or stopNone with the caller's registers.
func step(a *arch, t *Table, row *Row, regs *Regs, mem Memory) (Regs, Stop, error) {
	var cfa uint64
	if row.CFA.Expr.Set() {
		v, err := eval(t.ExprBytes(row.CFA.Expr), regs, mem, nil)
		if err != nil {
			return Regs{}, stopFor(err), err
		}
		cfa = v
	} else {
		base, ok := regs.Get(uint64(row.CFA.Reg))
		if !ok {
			return Regs{}, StopUnsupported, fmt.Errorf("%w: CFA based on register %d, not known", ErrUnsupported, row.CFA.Reg)
		}
		cfa = base + uint64(row.CFA.Off)
	}
	var next Regs
	for reg := 0; reg <= maxRegister; reg++ {
		rule := &row.Regs[reg]
		var v uint64
		ok := true
		switch rule.Kind {
		case RuleUnspecified, RuleSameValue:
			v, ok = regs.Get(uint64(reg))
			if reg == a.ra && rule.Kind == RuleUnspecified && !a.raKept {
				ok = false
			}
		case RuleUndefined:
			if reg == a.ra {
				return Regs{}, StopOutermost, nil
			}
			ok = false
		case RuleOffset:
			if v, ok = mem.ReadUint64(cfa + uint64(rule.Off)); !ok {
				if reg == a.ra || reg == a.fp {
					return Regs{}, StopOutsideStack, ErrOutsideStack
				}
			}
		case RuleValOffset:
			v = cfa + uint64(rule.Off)
		case RuleRegister:
			v, ok = regs.Get(uint64(rule.Reg))
		case RuleExpression, RuleValExpression:
			addr, err := eval(t.ExprBytes(rule.Expr), regs, mem, &cfa)
			if err != nil {
				if reg == a.ra {
					return Regs{}, stopFor(err), err
				}
				ok = false
				break
			}
			v = addr
			if rule.Kind == RuleExpression {
				v, ok = mem.ReadUint64(addr)
				if !ok && reg == a.ra {
					return Regs{}, StopOutsideStack, ErrOutsideStack
				}
			}
		}
		if ok {
			next.Set(reg, v)
		}
	}
	if row.Regs[a.sp].Kind == RuleUnspecified {
		// The caller's stack pointer is the CFA by definition (DWARF5
		// §6.4: the value of the stack pointer at the call site).
		next.Set(a.sp, cfa)
	}
	if _, ok := next.Get(uint64(a.ra)); !ok {
		return Regs{}, StopUnsupported, fmt.Errorf("%w: return address rule %d", ErrUnsupported, row.Regs[a.ra].Kind)
	}
	return next, stopNone, nil
}

func stopFor(err error) Stop {
	if errors.Is(err, ErrOutsideStack) {
		return StopOutsideStack
	}
	return StopUnsupported
}

// framePointer steps through the frame record at the frame pointer:
// the caller's frame pointer there, the return address 8 bytes above,
// on x86-64 the caller's rsp 16 above (psABI §3.4.1 with the frame
// pointer kept). An arm64 frame record (AAPCS64 §6.2.3) is at the
// bottom of its frame, so fp+16 is only a lower bound of the caller's
// sp: a caller whose CFA is sp-based does not unwind after it.
func framePointer(a *arch, regs *Regs, mem Memory) (Regs, Stop) {
	var next Regs
	bp, ok := regs.Get(uint64(a.fp))
	if !ok {
		return next, StopUnsupported
	}
	saved, ok1 := mem.ReadUint64(bp)
	ra, ok2 := mem.ReadUint64(bp + 8)
	if !ok1 || !ok2 {
		return next, StopOutsideStack
	}
	next.Set(a.fp, saved)
	next.Set(a.ra, ra)
	next.Set(a.sp, bp+16)
	return next, stopNone
}

// entry steps out of a function stopped at its first instruction: the
// call has just pushed the return address at rsp, and rbp is still the
// caller's (the psABI's CIE rule at a function's start, CFA = rsp+8,
// return address at CFA-8, which holds where no FDE says so).
// On arm64 the return address is still in the link register and sp is
// the caller's.
func entry(a *arch, regs *Regs, mem Memory) (Regs, Stop) {
	var next Regs
	sp, _ := regs.Get(uint64(a.sp))
	if bp, ok := regs.Get(uint64(a.fp)); ok {
		next.Set(a.fp, bp)
	}
	if a.raKept {
		ra, ok := regs.Get(uint64(a.ra))
		if !ok {
			return next, StopUnsupported
		}
		next.Set(a.ra, ra)
		next.Set(a.sp, sp)
		return next, stopNone
	}
	ra, ok := mem.ReadUint64(sp)
	if !ok {
		return next, StopOutsideStack
	}
	next.Set(a.ra, ra)
	next.Set(a.sp, sp+8)
	return next, stopNone
}

// Sample is a copied user stack with the registers the walk starts
// from, as stack.bpf.h's probekit_copy_stack takes them (bpf.DecodeStackCopy).
type Sample struct {
	// IP, SP and BP are rip, rsp and rbp on x86-64, and pc, sp and x29
	// on arm64, where LR is x30.
	IP, SP, BP uint64
	LR         uint64
	Stack      StackCopy
	// AtEntry says IP is a function's first instruction (a uprobe on a
	// function): where its object has no CFI (Go, which writes none in
	// .eh_frame, JIT code), the first step takes the return address at
	// rsp rather than the frame record at rbp, which is still the
	// caller's and would skip it.
	AtEntry bool
	// Machine is the sampled code's: 0 (x86-64, as bpf.DecodeStackCopy
	// gives), elf.EM_X86_64 or elf.EM_AARCH64.
	Machine elf.Machine
}

// Unwind walks s with the CFI of objs.
func (s Sample) Unwind(objs Objects) Result {
	var regs Regs
	if s.Machine == elf.EM_AARCH64 {
		regs.Set(RegPC, s.IP)
		regs.Set(RegSP, s.SP)
		regs.Set(RegX29, s.BP)
		regs.Set(RegX30, s.LR)
		return unwind(&archA64, regs, s.Stack, objs, s.AtEntry)
	}
	regs.Set(RegRA, s.IP)
	regs.Set(RegRSP, s.SP)
	regs.Set(RegRBP, s.BP)
	return unwind(&archX86, regs, s.Stack, objs, s.AtEntry)
}
