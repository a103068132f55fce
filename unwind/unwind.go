package unwind

import (
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
// column (RegRSP, RegRBP, RegRA for the instruction pointer).
type Regs struct {
	v     [maxRegister + 1]uint64
	known uint32
}

// Set records register column reg's value.
func (r *Regs) Set(reg int, v uint64) {
	if reg >= 0 && reg <= maxRegister {
		r.v[reg] = v
		r.known |= 1 << reg
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

// Unwind walks the stack from regs (rip in RegRA, rsp, rbp) through
// mem, with each object's CFI, falling back to the frame-pointer chain
// (saved rbp at rbp, return address at rbp+8) for objects without CFI.
//
// The first frame is looked up at its own address, later ones at the
// return address minus 1 (the call instruction: a call may be the last
// instruction of a function), except after a signal frame ("S"
// augmentation), whose next address is the interrupted instruction
// itself. A signal frame's rules read the caller's registers from the
// sigcontext on the stack, so a copy that holds the signal frame
// unwinds through it; glibc's __restore_rt has such rules.
func Unwind(regs Regs, mem Memory, objs Objects) Result {
	return unwind(regs, mem, objs, false)
}

func unwind(regs Regs, mem Memory, objs Objects, atEntry bool) Result {
	var res Result
	pc, ok := regs.Get(RegRA)
	if !ok {
		res.Stop = StopUnmapped
		return res
	}
	exact := true
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
		sp, _ := regs.Get(RegRSP)
		var next Regs
		var stop Stop
		var err error
		var signal bool
		if t != nil {
			var row Row
			row, err = t.Find(look - bias)
			switch {
			case err == nil:
				next, stop, err = step(&row, &regs, mem)
				signal = row.Signal
			case errors.Is(err, ErrNoFDE) && atEntry && len(res.Frames) == 1:
				next, stop = entry(&regs, mem)
			case errors.Is(err, ErrNoFDE):
				next, stop = framePointer(&regs, mem)
				if stop == StopOutsideStack {
					stop = StopNoFDE
				}
				res.ByFramePointer++
			default:
				stop = StopUnsupported
			}
		} else if atEntry && len(res.Frames) == 1 {
			next, stop = entry(&regs, mem)
		} else {
			next, stop = framePointer(&regs, mem)
			res.ByFramePointer++
		}
		if stop != stopNone {
			res.Stop, res.Err = stop, err
			return res
		}
		ra, _ := next.Get(RegRA)
		nsp, _ := next.Get(RegRSP)
		if ra == 0 {
			res.Stop = StopOutermost
			return res
		}
		if nsp <= sp && !signal {
			res.Stop = StopNoProgress
			return res
		}
		regs, pc, exact = next, ra, signal
	}
}

// step computes the caller's registers from row. It returns a non-zero
// Stop, or stopNone with the caller's registers.
func step(row *Row, regs *Regs, mem Memory) (Regs, Stop, error) {
	var cfa uint64
	if row.CFA.Expr != nil {
		v, err := eval(row.CFA.Expr, regs, mem, nil)
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
			if reg == RegRA && rule.Kind == RuleUnspecified {
				ok = false
			}
		case RuleUndefined:
			if reg == RegRA {
				return Regs{}, StopOutermost, nil
			}
			ok = false
		case RuleOffset:
			if v, ok = mem.ReadUint64(cfa + uint64(rule.Off)); !ok {
				if reg == RegRA || reg == RegRBP {
					return Regs{}, StopOutsideStack, ErrOutsideStack
				}
			}
		case RuleValOffset:
			v = cfa + uint64(rule.Off)
		case RuleRegister:
			v, ok = regs.Get(uint64(rule.Reg))
		case RuleExpression, RuleValExpression:
			a, err := eval(rule.Expr, regs, mem, &cfa)
			if err != nil {
				if reg == RegRA {
					return Regs{}, stopFor(err), err
				}
				ok = false
				break
			}
			v = a
			if rule.Kind == RuleExpression {
				v, ok = mem.ReadUint64(a)
				if !ok && reg == RegRA {
					return Regs{}, StopOutsideStack, ErrOutsideStack
				}
			}
		}
		if ok {
			next.Set(reg, v)
		}
	}
	if row.Regs[RegRSP].Kind == RuleUnspecified {
		// The caller's stack pointer is the CFA by definition (DWARF5
		// §6.4: the value of the stack pointer at the call site).
		next.Set(RegRSP, cfa)
	}
	if _, ok := next.Get(RegRA); !ok {
		return Regs{}, StopUnsupported, fmt.Errorf("%w: return address rule %d", ErrUnsupported, row.Regs[RegRA].Kind)
	}
	return next, stopNone, nil
}

func stopFor(err error) Stop {
	if errors.Is(err, ErrOutsideStack) {
		return StopOutsideStack
	}
	return StopUnsupported
}

// framePointer steps through the frame record at rbp: the caller's rbp
// at rbp, the return address at rbp+8, the caller's rsp at rbp+16
// (psABI §3.4.1 with the frame pointer kept).
func framePointer(regs *Regs, mem Memory) (Regs, Stop) {
	var next Regs
	bp, ok := regs.Get(RegRBP)
	if !ok {
		return next, StopUnsupported
	}
	saved, ok1 := mem.ReadUint64(bp)
	ra, ok2 := mem.ReadUint64(bp + 8)
	if !ok1 || !ok2 {
		return next, StopOutsideStack
	}
	next.Set(RegRBP, saved)
	next.Set(RegRA, ra)
	next.Set(RegRSP, bp+16)
	return next, stopNone
}

// entry steps out of a function stopped at its first instruction: the
// call has just pushed the return address at rsp, and rbp is still the
// caller's (the psABI's CIE rule at a function's start, CFA = rsp+8,
// return address at CFA-8, which holds where no FDE says so).
func entry(regs *Regs, mem Memory) (Regs, Stop) {
	var next Regs
	sp, _ := regs.Get(RegRSP)
	ra, ok := mem.ReadUint64(sp)
	if !ok {
		return next, StopOutsideStack
	}
	if bp, ok := regs.Get(RegRBP); ok {
		next.Set(RegRBP, bp)
	}
	next.Set(RegRA, ra)
	next.Set(RegRSP, sp+8)
	return next, stopNone
}

// Sample is a copied user stack with the registers the walk starts
// from, as stack.bpf.h's probekit_copy_stack takes them (bpf.DecodeStackCopy).
type Sample struct {
	IP, SP, BP uint64
	Stack      StackCopy
	// AtEntry says IP is a function's first instruction (a uprobe on a
	// function): where its object has no CFI (Go, which writes none in
	// .eh_frame, JIT code), the first step takes the return address at
	// rsp rather than the frame record at rbp, which is still the
	// caller's and would skip it.
	AtEntry bool
}

// Unwind walks s with the CFI of objs.
func (s Sample) Unwind(objs Objects) Result {
	var regs Regs
	regs.Set(RegRA, s.IP)
	regs.Set(RegRSP, s.SP)
	regs.Set(RegRBP, s.BP)
	return unwind(regs, s.Stack, objs, s.AtEntry)
}
