package usdt

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"

	"golang.org/x/arch/arm/armasm"
	"golang.org/x/arch/arm64/arm64asm"
	"golang.org/x/arch/ppc64/ppc64asm"
	"golang.org/x/arch/s390x/s390xasm"
	"golang.org/x/arch/x86/x86asm"
)

// nopDecoder returns the length of the NOP instruction code starts with,
// or 0 when code starts with anything else. order is the file's byte
// order (Power instructions follow it; the others have a fixed one).
type nopDecoder func(code []byte, order binary.ByteOrder) int

// nopDecoders recognise every encoding of each architecture's NOP and of
// its architectural aliases: sys/sdt.h emits the assembler's "nop", but
// producers may emit any (libbpf's usdt.h takes its USDT_NOP from the
// user). An instruction that only happens to do nothing (a register moved
// onto itself, a hint, x86 PAUSE) is not accepted unless an assembler
// emits it as "nop": the check exists to catch wrong offsets, and a
// broader set would let more of them through. Machines absent from the
// table cannot be checked, and their locations get a SiteError.
var nopDecoders = map[elf.Machine]nopDecoder{
	elf.EM_X86_64:    func(code []byte, _ binary.ByteOrder) int { return x86Nop(code, 64) },
	elf.EM_386:       func(code []byte, _ binary.ByteOrder) int { return x86Nop(code, 32) },
	elf.EM_AARCH64:   arm64Nop,
	elf.EM_ARM:       armNop,
	elf.EM_S390:      s390Nop,
	elf.EM_RISCV:     riscvNop,
	elf.EM_PPC64:     ppcNop,
	elf.EM_PPC:       ppcNop,
	elf.EM_LOONGARCH: loongNop,
}

// x86 pairs that libbpf's usdt.h emits, a 1-byte NOP followed by a long
// one, so that kernels with the uprobe syscall can optimise the probe at
// +1:
//
//	nop; nopl 0x0(%rax,%rax,1)         90 0f 1f 44 00 00 (libbpf/usdt, reverted in b0144b0)
//	nop; nopw %cs:0x0(%rax,%rax,1)     90 66 2e 0f 1f 84 00 00 00 00 00 (libbpf/usdt 9018f82)
var (
	x86Nop5  = []byte{0x0f, 0x1f, 0x44, 0x00, 0x00}
	x86Nop10 = []byte{0x66, 0x2e, 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00}
)

// x86Nop decodes one instruction in the given mode (64 or 32) and accepts
// the NOPs of the Intel SDM (vol. 2, "NOP—No Operation"): 90, 0f 1f /0
// with any ModRM, SIB and displacement, and any of these with prefixes
// the decoder accepts (66, segment overrides, REP; gas pads with "66 66
// 2e 0f 1f 84 ..."). Also "xchg r, r" of one register, which is what
// "66 90" disassembles to ("xchg %ax,%ax") and which gas emits for some
// fills, except with a 32-bit register in 64-bit mode, where writing it
// clears the upper half ("87 c0" is not a NOP there). Refused: LOCK
// (#UD), 0f 1f with a reg field other than 0 (reserved, "hint NOPs" that
// future processors may define), PAUSE (f3 90), and REX.W 0f 1f, which
// x86asm does not decode (no producer emits it: gas, LLVM and the Go
// assembler pad with 66 and 2e prefixes instead).
func x86Nop(code []byte, mode int) int {
	in, err := x86asm.Decode(code, mode)
	if err != nil || in.Len == 0 || in.Len > len(code) {
		return 0
	}
	for _, p := range in.Prefix {
		if p == 0 {
			break
		}
		if p&x86asm.PrefixInvalid != 0 || p&^(x86asm.PrefixImplicit|x86asm.PrefixIgnored) == x86asm.PrefixLOCK {
			return 0
		}
	}
	switch in.Op {
	case x86asm.NOP:
		return in.Len
	case x86asm.XCHG:
		a, ok1 := in.Args[0].(x86asm.Reg)
		b, ok2 := in.Args[1].(x86asm.Reg)
		if !ok1 || !ok2 || a != b || (mode == 64 && x86asm.EAX <= a && a <= x86asm.R15L) {
			return 0
		}
		return in.Len
	}
	return 0
}

// x86SegmentPrefixes are the prefixes on which the kernel refuses a uprobe
// (arch/x86/kernel/uprobes.c, is_prefix_bad(), with LOCK, which no NOP
// carries), failing with ENOTSUPP (errno 524). gas fills 10 and 11 bytes
// with such a NOP: "66 2e 0f 1f 84 ...".
var x86SegmentPrefixes = []x86asm.Prefix{x86asm.PrefixES, x86asm.PrefixCS, x86asm.PrefixSS, x86asm.PrefixDS}

// x86UprobeRefuses returns why the kernel will not place a uprobe on the
// instruction code starts with, a NOP, or "" when it will.
func x86UprobeRefuses(code []byte, mode int) string {
	in, err := x86asm.Decode(code, mode)
	if err != nil {
		return ""
	}
	for _, p := range in.Prefix {
		if p == 0 {
			break
		}
		if slices.Contains(x86SegmentPrefixes, p&^(x86asm.PrefixImplicit|x86asm.PrefixIgnored)) {
			return fmt.Sprintf("the NOP has a %02x segment prefix, on which the kernel places no uprobe (arch/x86/kernel/uprobes.c, is_prefix_bad)", uint8(p))
		}
	}
	return ""
}

// arm64Nop accepts NOP (d503201f, "HINT #0"), the A64 NOP's one
// encoding (Arm Architecture Reference Manual for A-profile, "NOP"). Other hints (YIELD, WFE, BTI, the
// unallocated ones) are not NOPs. A64 instructions are little-endian
// whatever the data byte order.
func arm64Nop(code []byte, _ binary.ByteOrder) int {
	in, err := arm64asm.Decode(code)
	if err != nil || in.Op != arm64asm.NOP {
		return 0
	}
	return 4
}

// Thumb NOPs (ARMv7-A/R Architecture Reference Manual, "NOP" encodings T1
// and T2; "MOV (register, Thumb)" encoding T1, which pre-Thumb-2
// assemblers emit for "nop" as "mov r8, r8"), as stored: halfwords,
// little-endian.
var (
	thumbNop  = []byte{0x00, 0xbf}             // nop, bf00
	thumbNopW = []byte{0xaf, 0xf3, 0x00, 0x80} // nop.w, f3af 8000
	thumbMov  = []byte{0xc0, 0x46}             // mov r8, r8, 46c0
)

// armConds are the A32 condition suffixes armasm appends to an Op's name
// ("Conditional execution"), AL omitted.
var armConds = []string{"EQ", "NE", "CS", "CC", "MI", "PL", "VS", "VC", "HI", "LS", "GE", "LT", "GT", "LE"}

// armNop accepts the A32 NOP (e320f000, "NOP" encoding A1) and "mov rN,
// rN" (e1a0N00N without S, "MOV (register, ARM)": what gas emits
// for "nop" before ARMv6K), each with any condition, decoded by armasm;
// then the Thumb NOPs. A location's address does not say which
// instruction set its code is in (a label in Thumb code is even), so A32
// is tried first, as before: on a Thumb-2 fixture (armhf) every site is
// bf00, which no A32 NOP starts with. A32 instructions are little-endian
// on ARMv7 and in BE8 images, the only big-endian kind Linux builds
// today.
func armNop(code []byte, _ binary.ByteOrder) int {
	if len(code) >= 4 {
		if in, err := armasm.Decode(code[:4], armasm.ModeARM); err == nil && armA32Nop(in) {
			return 4
		}
	}
	switch {
	case bytes.HasPrefix(code, thumbNopW):
		return 4
	case bytes.HasPrefix(code, thumbNop), bytes.HasPrefix(code, thumbMov):
		return 2
	}
	return 0
}

// armA32Nop reports whether in is NOP or MOV of a register onto itself
// (not PC: that branches), with or without a condition and never with
// S (flags set).
func armA32Nop(in armasm.Inst) bool {
	op, cond, _ := strings.Cut(in.Op.String(), ".")
	if cond != "" && !slices.Contains(armConds, cond) {
		return false // ".S" and ".S.cond" set flags; ".ZZ" is not a condition
	}
	switch op {
	case "NOP":
		return true
	case "MOV":
		d, ok1 := in.Args[0].(armasm.Reg)
		m, ok2 := in.Args[1].(armasm.Reg)
		return ok1 && ok2 && d == m && d != armasm.PC
	}
	return false
}

// s390Nop accepts the branches whose mask is 0, which are never taken
// (z/Architecture Principles of Operation, chapter 7, "BRANCH ON
// CONDITION" and "BRANCH RELATIVE ON CONDITION": with M1 = 0 no branch
// occurs, and BCR serialises only with M1 = 14 or 15): nopr "bcr 0,%rN"
// (07 0N), nop "bc 0,D(X,B)" (47 0X BD DD; sys/sdt.h's "nop 0" is
// 47000000), jnop "brc 0,I" (a7 04 ...), jgnop "brcl 0,I" (c0 04 ...).
// Big-endian only.
func s390Nop(code []byte, _ binary.ByteOrder) int {
	// The two high bits of the first byte give the length: 00 two bytes,
	// 01 and 10 four, 11 six (Principles of Operation, "Instruction
	// Formats"). s390xasm reads that many bytes without checking.
	if len(code) == 0 || len(code) < [...]int{2, 4, 4, 6}[code[0]>>6] {
		return 0
	}
	in, err := s390xasm.Decode(code)
	if err != nil || in.Len == 0 || in.Len > len(code) {
		return 0
	}
	switch in.Op {
	case s390xasm.BC, s390xasm.BCR, s390xasm.BRC, s390xasm.BRCL:
		if m, ok := in.Args[0].(s390xasm.Mask); ok && m == 0 {
			return in.Len
		}
	}
	return 0
}

// riscvNop accepts NOP, "addi x0, x0, 0" (00000013), and C.NOP, "c.addi
// x0, 0" (0001), the only NOP encodings (RISC-V Unprivileged ISA, "NOP
// Instruction" in RV32I and "NOP Instruction" in the C extension; the
// other addi/c.addi to x0 are HINTs, reserved for future use, which
// riscv64asm decodes as plain NOPs and is therefore not used here).
// Instructions are little-endian parcels; the two low bits of the first
// say whether it is 32-bit (11) or compressed.
func riscvNop(code []byte, _ binary.ByteOrder) int {
	switch {
	case len(code) >= 4 && code[0]&3 == 3:
		if binary.LittleEndian.Uint32(code) == 0x00000013 {
			return 4
		}
	case len(code) >= 2 && code[0]&3 != 3:
		if binary.LittleEndian.Uint16(code) == 0x0001 {
			return 2
		}
	}
	return 0
}

// ppcNop accepts nop, "ori 0,0,0" (60000000, the preferred no-op), xnop,
// "xori 0,0,0" (68000000, the executed form of no-op), and the Power ISA
// 3.1 prefixed pnop (07000000 00000000) (Power ISA v3.1, Book I,
// "Fixed-Point Logical Instructions" and "Prefixed No-op Instruction"), in
// the file's byte order. "or N,N,N" forms are thread-priority hints, not
// no-ops, and are refused.
func ppcNop(code []byte, order binary.ByteOrder) int {
	in, err := ppc64asm.Decode(code, order)
	if err != nil || in.Len == 0 || in.Len > len(code) {
		return 0
	}
	switch in.Op {
	case ppc64asm.NOP, ppc64asm.PNOP:
		return in.Len
	case ppc64asm.XORI:
		if in.Args[0] == ppc64asm.R0 && in.Args[1] == ppc64asm.R0 && in.Args[2] == ppc64asm.Imm(0) {
			return in.Len
		}
	}
	return 0
}

// loongNop accepts nop, "andi $zero, $zero, 0" (03400000), LoongArch's
// one NOP encoding (LoongArch Reference Manual vol. 1, "ANDI, ORI, XORI":
// NOP is an alias of andi r0, r0, 0). Instructions are little-endian.
func loongNop(code []byte, _ binary.ByteOrder) int {
	if len(code) >= 4 && binary.LittleEndian.Uint32(code) == 0x03400000 {
		return 4
	}
	return 0
}
