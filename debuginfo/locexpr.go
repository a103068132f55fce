package debuginfo

import "debug/elf"

// Location expressions (DWARF 5 §2.5, §2.6) as they stand at a
// function's entry: which register or stack slot holds each piece of a
// parameter. Only the shapes compilers emit for a parameter at its entry
// are understood; any other expression makes its piece unavailable
// (PieceNone), never an error.

// DW_OP_* (DWARF 5 §7.7.1) of location descriptions.
const (
	locOpReg0         = 0x50
	locOpReg31        = 0x6f
	locOpBreg0        = 0x70
	locOpBreg31       = 0x8f
	locOpRegx         = 0x90
	locOpFbreg        = 0x91
	locOpBregx        = 0x92
	locOpPiece        = 0x93
	locOpNop          = 0x96
	locOpCallFrameCFA = 0x9c
	locOpStackValue   = 0x9f
	locOpEntryValue   = 0xa3
	locOpGNUEntryVal  = 0xf3 // GCC's DW_OP_entry_value before DWARF 5
)

// maxPieces bounds the pieces of one location: Go's largest parameters
// in registers (an interface, a slice) have 2 or 3; a C struct in
// registers at most 2 per eightbyte.
const maxPieces = 16

// PieceKind says where a piece of a value is at a function's entry.
type PieceKind uint8

const (
	// PieceNone: not available at the entry (optimized out, computed,
	// or stored in the function's own frame only after its prologue).
	PieceNone PieceKind = iota
	// PieceReg: in register Reg.
	PieceReg
	// PieceStack: in memory at the canonical frame address (the stack
	// pointer before the call instruction) plus Offset: where the
	// caller put arguments passed in memory.
	PieceStack
	// PieceIndirect: in memory at the address register Reg holds plus
	// Offset.
	PieceIndirect
)

func (k PieceKind) String() string {
	switch k {
	case PieceReg:
		return "register"
	case PieceStack:
		return "stack"
	case PieceIndirect:
		return "indirect"
	}
	return "not available"
}

// Piece is one part of a parameter's value at the function's entry.
type Piece struct {
	Kind PieceKind
	// Reg is the register, by its DWARF number (RegisterName names it),
	// for PieceReg and PieceIndirect.
	Reg int
	// Offset is the memory offset from the CFA (PieceStack) or from the
	// register's value (PieceIndirect).
	Offset int64
	// Size is the bytes of the value this piece holds (DW_OP_piece);
	// 0 for a location of one piece, which holds the whole value.
	Size int64
}

// frameInfo is what an expression at a function's entry needs of the
// machine and the function.
type frameInfo struct {
	// sp is the DWARF number of the stack pointer; -1 when unknown.
	sp int
	// spToCFA is the CFA minus the stack pointer at the entry: the
	// bytes the call instruction pushed (x86-64: the return address).
	spToCFA int64
	// fb is the frame base (DW_AT_frame_base) at the entry as an offset
	// from the CFA; fbOK is false when it is not one (a register such
	// as rbp, which the prologue has not set yet).
	fb   int64
	fbOK bool
	// addrSize is the unit's address size (DW_OP_addr's operand).
	addrSize int
}

// entryFrame is the frame at a function's entry on machine m: the stack
// pointer's DWARF number and the CFA's distance from it (x86-64 psABI:
// the call pushed an 8-byte return address, CFA = rsp + 8; i386: 4;
// AArch64 and RISC-V: the return address is in a register, CFA = sp).
func entryFrame(m elf.Machine) frameInfo {
	switch m {
	case elf.EM_X86_64:
		return frameInfo{sp: 7, spToCFA: 8}
	case elf.EM_386:
		return frameInfo{sp: 4, spToCFA: 4}
	case elf.EM_AARCH64:
		return frameInfo{sp: 31}
	case elf.EM_RISCV:
		return frameInfo{sp: 2}
	}
	return frameInfo{sp: -1}
}

// frameBase sets fi's frame base from the DW_AT_frame_base expression at
// the entry: DW_OP_call_frame_cfa (GCC and Go) is the CFA; DW_OP_bregN of
// the stack pointer is an offset from it. A register (clang's DW_OP_reg7,
// rsp, or DW_OP_reg6, rbp) is its value after the prologue, which may
// move it (clang -O2's shapes pushes rbx first: its n, at CFA+0, is
// DW_OP_fbreg 16 from the rsp after the push); it leaves the base
// unknown.
func (fi *frameInfo) frameBase(expr []byte) {
	fi.fbOK = false
	switch {
	case len(expr) == 1 && expr[0] == locOpCallFrameCFA:
		fi.fb, fi.fbOK = 0, true
	case len(expr) > 1 && fi.sp >= 0 && (int(expr[0]) == locOpBreg0+fi.sp && fi.sp < 32 || expr[0] == locOpBregx):
		p := 1
		if expr[0] == locOpBregx {
			r, q, ok := uleb(expr, p, len(expr))
			if !ok || r != uint64(fi.sp) {
				return
			}
			p = q
		}
		off, q, ok := sleb(expr, p, len(expr))
		if ok && q == len(expr) {
			fi.fb, fi.fbOK = off-fi.spToCFA, true
		}
	}
}

// decodeLoc splits expr into its pieces at the entry. An empty expression
// (optimized out) gives none.
func (fi *frameInfo) decodeLoc(expr []byte) []Piece {
	var out []Piece
	start := 0
	for p := 0; p <= len(expr) && len(out) < maxPieces; {
		if p == len(expr) {
			if start < p {
				out = append(out, fi.piece(expr[start:p]))
			}
			break
		}
		op := expr[p]
		n, ok := opLen(expr, p, fi.addrSize)
		if !ok {
			// Undecodable: the rest is one unavailable piece.
			return append(out, Piece{})
		}
		if op == locOpPiece {
			size, _, _ := uleb(expr, p+1, len(expr))
			pc := fi.piece(expr[start:p])
			if size > 1<<20 {
				size = 0
			}
			pc.Size = int64(size)
			out = append(out, pc)
			start = p + n
		}
		p += n
	}
	return out
}

// piece decodes the operators of one piece.
func (fi *frameInfo) piece(ops []byte) Piece {
	ops = trimNops(ops)
	if len(ops) == 0 {
		return Piece{}
	}
	op := ops[0]
	switch {
	case op >= locOpReg0 && op <= locOpReg31 && len(ops) == 1:
		return Piece{Kind: PieceReg, Reg: int(op - locOpReg0)}
	case op == locOpRegx:
		r, q, ok := uleb(ops, 1, len(ops))
		if ok && q == len(ops) && r < 1<<16 {
			return Piece{Kind: PieceReg, Reg: int(r)}
		}
	case op == locOpFbreg:
		off, q, ok := sleb(ops, 1, len(ops))
		if ok && q == len(ops) && fi.fbOK {
			return fi.stack(fi.fb + off)
		}
	case op >= locOpBreg0 && op <= locOpBreg31 || op == locOpBregx:
		r, p := uint64(op-locOpBreg0), 1
		if op == locOpBregx {
			var ok bool
			if r, p, ok = uleb(ops, 1, len(ops)); !ok || r >= 1<<16 {
				return Piece{}
			}
		}
		off, q, ok := sleb(ops, p, len(ops))
		if !ok || q != len(ops) {
			return Piece{}
		}
		if fi.sp >= 0 && int(r) == fi.sp {
			return fi.stack(off - fi.spToCFA)
		}
		return Piece{Kind: PieceIndirect, Reg: int(r), Offset: off}
	case op == locOpCallFrameCFA && len(ops) == 1:
		return fi.stack(0)
	case op == locOpEntryValue || op == locOpGNUEntryVal:
		// DW_OP_entry_value(DW_OP_regN) DW_OP_stack_value: the value
		// register N held at the entry, which is where it is there.
		n, q, ok := uleb(ops, 1, len(ops))
		if !ok || n == 0 || n > uint64(len(ops)-q) {
			return Piece{}
		}
		sub, rest := ops[q:q+int(n)], trimNops(ops[q+int(n):])
		if len(rest) != 1 || rest[0] != locOpStackValue {
			return Piece{}
		}
		if pc := fi.piece(sub); pc.Kind == PieceReg {
			return pc
		}
	}
	return Piece{}
}

// stack is the memory at CFA+off: at the entry, only the caller's part
// of the stack (CFA and above) holds values; below it is the return
// address and then memory the function has not written yet.
func (fi *frameInfo) stack(off int64) Piece {
	if off < 0 {
		return Piece{}
	}
	return Piece{Kind: PieceStack, Offset: off}
}

func trimNops(ops []byte) []byte {
	for len(ops) > 0 && ops[0] == locOpNop {
		ops = ops[1:]
	}
	for len(ops) > 0 && ops[len(ops)-1] == locOpNop {
		ops = ops[:len(ops)-1]
	}
	return ops
}

// opLen is the length of the operator at expr[p] with its operands, for
// the operators of location descriptions and the common DWARF stack
// operators; false for one it cannot size.
func opLen(expr []byte, p, addrSize int) (int, bool) {
	op := expr[p]
	end := len(expr)
	lebs := func(k int) (int, bool) {
		q := p + 1
		for ; k > 0; k-- {
			var ok bool
			if _, q, ok = uleb(expr, q, end); !ok {
				return 0, false
			}
		}
		return q - p, true
	}
	fixed := func(n int) (int, bool) { return 1 + n, p+1+n <= end }
	switch {
	case op >= 0x30 && op <= 0x6f, op == locOpNop, op == locOpCallFrameCFA, op == locOpStackValue,
		op >= 0x12 && op <= 0x2e && op != 0x23 && op != 0x15 && op != 0x28, op == 0x06:
		// lit, reg, nop, call_frame_cfa, stack_value, stack and
		// arithmetic operators without operands, deref.
		return 1, true
	case op >= locOpBreg0 && op <= locOpBreg31, op == locOpFbreg, op == locOpRegx, op == locOpPiece,
		op == 0x10, op == 0x11, op == 0x23, op == 0x15: // constu, consts, plus_uconst, pick(1 byte, below)
		if op == 0x15 {
			return fixed(1)
		}
		return lebs(1)
	case op == locOpBregx, op == 0x9d: // bregx, bit_piece
		return lebs(2)
	case op == 0x08, op == 0x09, op == 0x94: // const1u/s, deref_size
		return fixed(1)
	case op == 0x0a, op == 0x0b, op == 0x28, op == 0x2f: // const2u/s, bra, skip
		return fixed(2)
	case op == 0x0c, op == 0x0d: // const4u/s
		return fixed(4)
	case op == 0x0e, op == 0x0f: // const8u/s
		return fixed(8)
	case op == 0x03: // addr
		return fixed(addrSize)
	case op == locOpEntryValue, op == locOpGNUEntryVal:
		n, q, ok := uleb(expr, p+1, end)
		if !ok || n > uint64(end-q) {
			return 0, false
		}
		return q + int(n) - p, true
	}
	return 0, false
}

// sleb reads a signed LEB128 number from b[p:end].
func sleb(b []byte, p, end int) (int64, int, bool) {
	var v int64
	shift := uint(0)
	for p < end {
		c := b[p]
		p++
		if shift < 64 {
			v |= int64(c&0x7f) << shift
		}
		shift += 7
		if c&0x80 == 0 {
			if shift < 64 && c&0x40 != 0 {
				v |= -1 << shift
			}
			return v, p, true
		}
	}
	return v, p, false
}

// RegisterName is the name of DWARF register reg on machine m (the
// psABIs' DWARF register numbering): "rdi" on x86-64, "x0" on AArch64;
// "" when it has none here.
func RegisterName(m elf.Machine, reg int) string {
	switch m {
	case elf.EM_X86_64:
		names := [...]string{"rax", "rdx", "rcx", "rbx", "rsi", "rdi", "rbp", "rsp",
			"r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15", "rip"}
		switch {
		case reg >= 0 && reg < len(names):
			return names[reg]
		case reg >= 17 && reg <= 32:
			return "xmm" + itoa(reg-17)
		}
	case elf.EM_AARCH64:
		switch {
		case reg >= 0 && reg <= 30:
			return "x" + itoa(reg)
		case reg == 31:
			return "sp"
		case reg >= 64 && reg <= 95:
			return "v" + itoa(reg-64)
		}
	}
	return ""
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}
