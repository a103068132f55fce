package argspec

import "debug/elf"

// Kind is the kind of operand a USDT argument is read from.
type Kind uint8

const (
	// Unsupported is an operand no BPF program can read (SIMD registers,
	// relocation operators, ...). Only that argument is unavailable; the
	// others of the probe still parse.
	Unsupported Kind = iota
	// Const is an immediate value, in Arg.Value.
	Const
	// Reg is the value of a register, Arg.Reg.
	Reg
	// Mem is the memory at Arg.Reg + Arg.Offset.
	Mem
	// SIB is the memory at Arg.Reg + Arg.Index*Arg.Scale + Arg.Offset.
	SIB
	// PCRel is the memory at Arg.Symbol + Arg.Offset, addressed relative
	// to the program counter (x86-64 `sym+8(%rip)`): the symbol's
	// link-time address plus the addend, plus the load bias at run time;
	// no register is read. Reg is the program counter (rip), or for i386
	// PIC code's `sym@GOTOFF(%ebx)`, which also addresses the symbol
	// itself, the GOT pointer. With an empty Symbol ("8(%rip)") the
	// address is relative to an instruction that the probe site does not
	// have, so an attacher cannot resolve it.
	PCRel
)

var kindNames = [...]string{
	Unsupported: "unsupported",
	Const:       "const",
	Reg:         "reg",
	Mem:         "mem",
	SIB:         "sib",
	PCRel:       "pcrel",
}

// String returns the name used in probekit's JSON output.
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "unknown"
}

// Register is a machine register named by an argument, with the offset of
// its slot in the architecture's struct pt_regs as the kernel's uapi
// headers define it (the context a uprobe BPF program receives).
type Register struct {
	// Name is the register as written in the note ("edi", "x0", "r15b").
	Name string
	// Offset is the byte offset of the register's slot in pt_regs.
	Offset uint16
}

// Arg is one decoded USDT argument.
type Arg struct {
	// Machine is the architecture whose grammar the argument was parsed
	// with; String and Format write the operand in its syntax.
	Machine elf.Machine
	// Size is the argument's width in bytes: 1, 2, 4 or 8.
	Size int
	// Signed is true when the spec starts with '-'.
	Signed bool
	// Float is true for the 'f' suffix ("-8f@%rax").
	Float bool
	// Kind says where the value lives.
	Kind Kind
	// Reg is the register for Reg, the base for Mem and SIB, and the
	// program counter (or i386 GOT pointer) for PCRel.
	Reg Register
	// Index is the index register of SIB.
	Index Register
	// Scale is the index multiplier of SIB: 1, 2, 4 or 8 (0 otherwise).
	Scale int
	// Offset is the displacement of Mem and SIB and the addend of PCRel.
	Offset int64
	// Value is the immediate of Const, as 64-bit two's complement.
	Value int64
	// Symbol is the symbol of PCRel.
	Symbol string
	// Operand is the operand text after '@', as written (without the
	// whitespace around it).
	Operand string
	// Reason says why an Unsupported operand cannot be read.
	Reason string
}
