package uprobe

import (
	"debug/elf"

	"golang.org/x/arch/arm64/arm64asm"
	"golang.org/x/arch/x86/x86asm"
)

// A Go function that may grow its stack starts with a check of the stack
// pointer against g.stackguard0; when the stack is too small (or the
// goroutine is asked to yield), it calls runtime.morestack, which grows or
// moves the stack and then jumps back to the function's FIRST instruction.
// An entry probe there fires once more per restart. Placed on the first
// instruction after the check, it fires once per call, and still sees the
// arguments in their registers and the stack pointer of the entry: the
// check only compares.
//
// The prologues, as cmd/compile emits them with the register ABI (Go
// 1.17+), g being R14 on amd64 and R28 on arm64, stackguard0 at offset 16
// of runtime.g:
//
//	amd64  CMPQ SP, 16(R14); JLS morestack
//	       LEAQ -N(SP), R12; CMPQ R12, 16(R14); JLS morestack
//	       MOVQ SP, R12; SUBQ $N, R12; JCS morestack; CMPQ R12, 16(R14); JLS morestack
//	arm64  MOVD 16(g), R16; CMP R16, RSP; BLS morestack
//	       MOVD 16(g), R16; SUB $N, RSP, R17; CMP R16, R17; BLS morestack
//	       MOVD 16(g), R16; [MOVD $N, R27;] SUBS $N, RSP, R17; BLO morestack; CMP R16, R17; BLS morestack
//
// Anything else (NOSPLIT functions, assembly) keeps the probe at offset 0.

// stackguardOffset is the offset of stackguard0 in runtime.g (after
// stack.lo and stack.hi, runtime/runtime2.go).
const stackguardOffset = 16

// maxPrologue bounds the instructions looked at before the check, and
// maxPrologueBytes the code read for them (6 x86 instructions of at most
// 15 bytes, or 6 arm64 words, fit).
const (
	maxPrologue      = 6
	maxPrologueBytes = 96
)

// goStackCheckEnd returns the offset, from the function's start, of the
// first instruction after its stack-bound check, or 0 when code does not
// start with one.
func goStackCheckEnd(machine elf.Machine, code []byte) uint64 {
	switch machine {
	case elf.EM_X86_64:
		return x86StackCheckEnd(code)
	case elf.EM_AARCH64:
		return arm64StackCheckEnd(code)
	}
	return 0
}

func x86StackCheckEnd(code []byte) uint64 {
	checked := false
	for i, n := 0, 0; n < maxPrologue && i < len(code); n++ {
		in, err := x86asm.Decode(code[i:], 64)
		if err != nil || in.Len <= 0 {
			return 0
		}
		i += in.Len
		switch {
		case checked:
			if in.Op == x86asm.JBE {
				return uint64(i)
			}
			return 0
		case in.Op == x86asm.CMP && (isStackguard(in.Args[0]) || isStackguard(in.Args[1])):
			checked = true
		case in.Op == x86asm.LEA || in.Op == x86asm.MOV || in.Op == x86asm.SUB || in.Op == x86asm.JB:
			// Computing SP-N for a large frame; JB (JCS) goes to morestack
			// when the subtraction wraps, and returns to the start too.
		default:
			return 0
		}
	}
	return 0
}

// isStackguard reports the operand 16(R14).
func isStackguard(a x86asm.Arg) bool {
	m, ok := a.(x86asm.Mem)
	return ok && m.Base == x86asm.R14 && m.Index == 0 && m.Disp == stackguardOffset
}

func arm64StackCheckEnd(code []byte) uint64 {
	loaded, compared := false, false
	for i, n := 0, 0; n < maxPrologue && i+4 <= len(code); n, i = n+1, i+4 {
		in, err := arm64asm.Decode(code[i : i+4])
		if err != nil {
			return 0
		}
		switch {
		case !loaded:
			// LDR X16, [X28,#16]: the first instruction of the check.
			if in.Op != arm64asm.LDR || !isGStackguard(in.Args[1]) {
				return 0
			}
			loaded = true
		case compared:
			if in.Op == arm64asm.B && isCond(in.Args[0], condLS) {
				return uint64(i + 4)
			}
			return 0
		case in.Op == arm64asm.CMP:
			compared = true
		case in.Op == arm64asm.SUB || in.Op == arm64asm.SUBS || in.Op == arm64asm.MOV:
			// SP-N for a large frame.
		case in.Op == arm64asm.B && isCond(in.Args[0], condLO):
			// SUBS wrapped (a huge frame): to morestack as well.
		default:
			return 0
		}
	}
	return 0
}

// Condition codes (Arm ARM, C1.2.4): "unsigned lower" (CC) and "unsigned
// lower or same".
const (
	condLO = 3
	condLS = 9
)

func isCond(a arm64asm.Arg, value uint8) bool {
	c, ok := a.(arm64asm.Cond)
	return ok && c.Value == value
}

// isGStackguard reports the memory operand [X28,#16].
func isGStackguard(a arm64asm.Arg) bool {
	m, ok := a.(arm64asm.MemImmediate)
	if !ok || m.Base != arm64asm.RegSP(arm64asm.X28) {
		return false
	}
	// MemImmediate keeps its offset unexported; its text is "[X28,#16]".
	return m.String() == "[X28,#16]"
}
