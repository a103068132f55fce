package argspec

import "debug/elf"

// grammar is one architecture's operand syntax and register file.
type grammar struct {
	machine elf.Machine
	// regs maps register names to pt_regs offsets (regs.go).
	regs map[string]uint16
	// zero lists hardwired zero registers, read as the constant 0.
	zero []string
	// special gives a specific reason for names that are registers but
	// not readable ones.
	special map[string]error
	// vector lists name prefixes that, followed by a digit, are FP/SIMD
	// registers.
	vector []string
	// pc lists the base register names that make an address PC-relative.
	pc []string
	// syntax selects the operand grammar and its canonical writer.
	syntax syntax
}

// syntax is an operand grammar family. Parse dispatches with a switch
// rather than through a function value so that escape analysis keeps the
// scanner on the stack (an indirect call would cost an allocation per
// argument).
type syntax uint8

const (
	syntaxATT     syntax = iota // x86-64, i386: parseX86
	syntaxBracket               // arm64, arm, loongarch64: parseBracket
	syntaxS390                  // parseS390
	syntaxRISCV                 // parseRISCV
	syntaxPPC                   // parsePPC
)

func (g *grammar) operand(sc *scanner, a *Arg) error {
	switch g.syntax {
	case syntaxATT:
		return parseX86(sc, a)
	case syntaxBracket:
		return parseBracket(sc, a)
	case syntaxS390:
		return parseS390(sc, a)
	case syntaxRISCV:
		return parseRISCV(sc, a)
	default:
		return parsePPC(sc, a)
	}
}

func (g *grammar) format(b []byte, a *Arg) []byte {
	switch g.syntax {
	case syntaxATT:
		return appendX86(b, a)
	case syntaxBracket:
		return appendBracket(b, a)
	case syntaxS390:
		return appendS390(b, a)
	case syntaxRISCV:
		return appendRISCV(b, a)
	default:
		return appendPPC(b, a)
	}
}

var grammars = map[elf.Machine]*grammar{
	elf.EM_X86_64: {
		machine: elf.EM_X86_64,
		regs:    x8664Regs,
		special: x86Special,
		vector:  []string{"xmm", "ymm", "zmm", "mm", "st", "k"},
		pc:      x8664PC,
		syntax:  syntaxATT,
	},
	elf.EM_386: {
		machine: elf.EM_386,
		regs:    i386Regs,
		special: x86Special,
		vector:  []string{"xmm", "ymm", "zmm", "mm", "st", "k"},
		syntax:  syntaxATT,
	},
	elf.EM_AARCH64: {
		machine: elf.EM_AARCH64,
		regs:    arm64Regs,
		zero:    arm64Zero,
		// v/q/d/s/h/b: SIMD&FP views; z/p: SVE.
		vector: []string{"v", "q", "d", "s", "h", "b", "z", "p"},
		syntax: syntaxBracket,
	},
	elf.EM_ARM: {
		machine: elf.EM_ARM,
		regs:    armRegs,
		vector:  []string{"s", "d", "q"},
		syntax:  syntaxBracket,
	},
	elf.EM_LOONGARCH: {
		machine: elf.EM_LOONGARCH,
		regs:    loong64Regs,
		zero:    loong64Zero,
		vector:  []string{"fa", "ft", "fs", "f", "vr", "xr"},
		syntax:  syntaxBracket,
	},
	elf.EM_S390: {
		machine: elf.EM_S390,
		regs:    s390xRegs,
		// f: floating point, v: vector, a: access, c: control registers.
		vector: []string{"f", "v", "a", "c"},
		syntax: syntaxS390,
	},
	elf.EM_RISCV: {
		machine: elf.EM_RISCV,
		regs:    riscv64Regs,
		zero:    riscv64Zero,
		vector:  []string{"fa", "ft", "fs", "f", "v"},
		syntax:  syntaxRISCV,
	},
	elf.EM_PPC64: {
		machine: elf.EM_PPC64,
		regs:    ppc64Regs,
		vector:  []string{"vs", "f", "v", "cr"},
		syntax:  syntaxPPC,
	},
}

// x86Special names x86 registers that exist but have no readable slot.
var x86Special = map[string]error{
	"ah": errHighByte, "bh": errHighByte, "ch": errHighByte, "dh": errHighByte,
	"cs": errSegment, "ds": errSegment, "es": errSegment, "fs": errSegment, "gs": errSegment, "ss": errSegment,
}

// Supported reports whether Parse knows the operand grammar and register
// file of machine. EM_PPC64 covers both ppc64 (big-endian) and ppc64le;
// EM_RISCV is parsed as riscv64 (8-byte pt_regs slots).
func Supported(machine elf.Machine) bool { return grammars[machine] != nil }

// RegisterOffset returns the offset in machine's pt_regs (the context of a
// uprobe program on a kernel of that architecture) of the register name
// as it appears in Register.Name ("edi", "x0", "r15"); a leading '%' or
// '$' is ignored. It reports false for names that have no slot (SIMD
// registers, zero registers, unknown names) and for unsupported machines.
func RegisterOffset(machine elf.Machine, name string) (uint16, bool) {
	g := grammars[machine]
	if g == nil {
		return 0, false
	}
	if len(name) > 0 && (name[0] == '%' || name[0] == '$') {
		name = name[1:]
	}
	off, ok := g.regs[name]
	return off, ok
}

// I386ToX8664 maps a register of an i386 argument to its slot in the
// x86-64 pt_regs. Parse(elf.EM_386, ...) gives offsets in the 32-bit
// pt_regs, which is what an i386 kernel passes to a uprobe program; a
// 32-bit process running on an x86-64 kernel is seen through the 64-bit
// pt_regs, so an attacher on such a kernel translates every register of
// an EM_386 argument with this function. The eight i386 registers keep
// their names (eax is the low half of rax). It reports false for a
// register that has no x86-64 slot.
func I386ToX8664(r Register) (Register, bool) {
	if _, ok := i386Regs[r.Name]; !ok {
		return Register{}, false
	}
	off, ok := x8664Regs[r.Name]
	return Register{Name: r.Name, Offset: off}, ok
}
