package unwind

import (
	"encoding/binary"
	"fmt"
)

// maxExprStack bounds the DWARF expression stack; the expressions
// compilers emit for CFI (the PLT rule, signal frames, stack
// realignment) need at most 3 entries.
const maxExprStack = 64

// DW_OP_* operators (DWARF5 §7.7.1) that CFI expressions use.
const (
	opAddr       = 0x03
	opDeref      = 0x06
	opConst1u    = 0x08
	opConst1s    = 0x09
	opConst2u    = 0x0a
	opConst2s    = 0x0b
	opConst4u    = 0x0c
	opConst4s    = 0x0d
	opConst8u    = 0x0e
	opConst8s    = 0x0f
	opConstu     = 0x10
	opConsts     = 0x11
	opDup        = 0x12
	opDrop       = 0x13
	opOver       = 0x14
	opSwap       = 0x16
	opAnd        = 0x1a
	opMinus      = 0x1c
	opMul        = 0x1e
	opNeg        = 0x1f
	opNot        = 0x20
	opOr         = 0x21
	opPlus       = 0x22
	opPlusUconst = 0x23
	opShl        = 0x24
	opShr        = 0x25
	opShra       = 0x26
	opXor        = 0x27
	opEq         = 0x29
	opGe         = 0x2a
	opGt         = 0x2b
	opLe         = 0x2c
	opLt         = 0x2d
	opNe         = 0x2e
	opLit0       = 0x30
	opLit31      = 0x4f
	opReg0       = 0x50
	opBreg0      = 0x70
	opBreg31     = 0x8f
	opBregx      = 0x92
	opNop        = 0x96
)

// eval computes a CFI expression (DWARF5 §6.4.1: the CFA, when pushed
// first, is the initial stack entry). Operators outside the set above,
// branches among them, are ErrUnsupported: no compiler's CFI on x86-64
// needs them (the PLT rule is breg7, breg16, lit15, and, lit11, ge,
// lit3, shl, plus; glibc's __restore_rt is breg7 and deref forms).
func eval(expr []byte, regs *Regs, mem Memory, push *uint64) (uint64, error) {
	r := reader{b: expr, order: binary.LittleEndian, section: "expression"}
	var st [maxExprStack]uint64
	n := 0
	if push != nil {
		st[0], n = *push, 1
	}
	pop := func() (uint64, error) {
		if n == 0 {
			return 0, fmt.Errorf("%w: expression stack underflow", ErrUnsupported)
		}
		n--
		return st[n], nil
	}
	for r.off < uint64(len(expr)) {
		op, _ := r.u8()
		var v uint64
		var err error
		switch {
		case op >= opLit0 && op <= opLit31:
			v = uint64(op - opLit0)
		case op >= opBreg0 && op <= opBreg31, op == opBregx:
			reg := uint64(op - opBreg0)
			if op == opBregx {
				if reg, err = r.uleb(); err != nil {
					return 0, err
				}
			}
			off, err := r.sleb()
			if err != nil {
				return 0, err
			}
			rv, ok := regs.Get(reg)
			if !ok {
				return 0, fmt.Errorf("%w: expression reads register %d, not known", ErrUnsupported, reg)
			}
			v = rv + uint64(off)
		case op == opAddr, op == opConst8u, op == opConst8s:
			v, err = r.u64()
		case op == opConst1u, op == opConst1s:
			var b uint8
			b, err = r.u8()
			v = uint64(b)
			if op == opConst1s {
				v = uint64(int64(int8(b)))
			}
		case op == opConst2u, op == opConst2s:
			var b uint16
			b, err = r.u16()
			v = uint64(b)
			if op == opConst2s {
				v = uint64(int64(int16(b)))
			}
		case op == opConst4u, op == opConst4s:
			var b uint32
			b, err = r.u32()
			v = uint64(b)
			if op == opConst4s {
				v = uint64(int64(int32(b)))
			}
		case op == opConstu:
			v, err = r.uleb()
		case op == opConsts:
			var s int64
			s, err = r.sleb()
			v = uint64(s)
		case op == opNop:
			continue
		case op == opDup, op == opOver:
			k := 1
			if op == opOver {
				k = 2
			}
			if n < k {
				return 0, fmt.Errorf("%w: expression stack underflow", ErrUnsupported)
			}
			v = st[n-k]
		case op == opDrop:
			if _, err := pop(); err != nil {
				return 0, err
			}
			continue
		case op == opSwap:
			if n < 2 {
				return 0, fmt.Errorf("%w: expression stack underflow", ErrUnsupported)
			}
			st[n-1], st[n-2] = st[n-2], st[n-1]
			continue
		case op == opDeref:
			a, err := pop()
			if err != nil {
				return 0, err
			}
			var ok bool
			if v, ok = mem.ReadUint64(a); !ok {
				return 0, fmt.Errorf("%w: expression reads %#x", ErrOutsideStack, a)
			}
		case op == opNeg, op == opNot, op == opPlusUconst:
			a, err := pop()
			if err != nil {
				return 0, err
			}
			switch op {
			case opNeg:
				v = -a
			case opNot:
				v = ^a
			default:
				u, err := r.uleb()
				if err != nil {
					return 0, err
				}
				v = a + u
			}
		case op >= opAnd && op <= opNe && op != 0x1b && op != 0x1d && op != 0x28 && op != opPlusUconst && op != opNeg && op != opNot:
			b, err := pop()
			if err != nil {
				return 0, err
			}
			a, err := pop()
			if err != nil {
				return 0, err
			}
			v = binop(op, a, b)
		default:
			return 0, fmt.Errorf("%w: DW_OP %#x", ErrUnsupported, op)
		}
		if err != nil {
			return 0, err
		}
		if n == maxExprStack {
			return 0, fmt.Errorf("%w: expression stack deeper than %d", ErrUnsupported, maxExprStack)
		}
		st[n] = v
		n++
	}
	return pop()
}

func binop(op byte, a, b uint64) uint64 {
	bool64 := func(c bool) uint64 {
		if c {
			return 1
		}
		return 0
	}
	switch op {
	case opAnd:
		return a & b
	case opMinus:
		return a - b
	case opMul:
		return a * b
	case opOr:
		return a | b
	case opPlus:
		return a + b
	case opShl:
		return a << (b & 63)
	case opShr:
		return a >> (b & 63)
	case opShra:
		return uint64(int64(a) >> (b & 63))
	case opXor:
		return a ^ b
	// Comparisons are signed (DWARF5 §2.5.1.4).
	case opEq:
		return bool64(a == b)
	case opGe:
		return bool64(int64(a) >= int64(b))
	case opGt:
		return bool64(int64(a) > int64(b))
	case opLe:
		return bool64(int64(a) <= int64(b))
	case opLt:
		return bool64(int64(a) < int64(b))
	default: // opNe
		return bool64(a != b)
	}
}
