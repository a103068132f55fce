package argspec

import (
	"debug/elf"
	"strconv"
)

// x86-64 and i386 operands, AT&T syntax as GCC and clang print them:
//
//	$IMM                          constant       -4@$-9
//	%REG                          register       -4@%edi
//	DISP(%BASE)                   memory         8@-8(%rbp), 8@(%rsp)
//	DISP(%BASE,%INDEX[,SCALE])    SIB            1@-96(%rbp,%rax,8)
//	EXPR(%rip)                    PC-relative    -4@40+CheckpointStats(%rip)
//
// where DISP is a number and EXPR a sum of numbers and at most one symbol
// ("sym", "sym+8", "8+sym", "sym-2").

func parseX86(sc *scanner, a *Arg) error {
	switch sc.peek() {
	case '$':
		sc.pos++
		sc.skipSpace()
		if isWordStart(sc.peek()) {
			return errSymConst
		}
		v, err := sc.number()
		if err != nil {
			return err
		}
		a.Kind, a.Value = Const, v
		return nil
	case '%':
		r, err := x86Register(sc)
		if err != nil {
			return err
		}
		if sc.eat(':') { // %fs:8 — thread-local storage
			return errSegment
		}
		if a.Size == 8 && sc.p.g.machine == elf.EM_386 {
			// GCC holds a 64-bit value in a register pair (eax:edx,
			// ecx:ebx, esi:edi) and the note names only the low half;
			// the halves are not adjacent in either pt_regs.
			return errRegPair
		}
		a.Kind, a.Reg = Reg, r
		return nil
	}

	off, sym, gotoff, err := x86Disp(sc)
	if err != nil {
		return err
	}
	if !sc.eat('(') {
		return errAbsolute
	}
	var base, index Register
	hasBase, hasIndex, scale := false, false, 1
	sc.skipSpace()
	switch sc.peek() {
	case '%':
		if base, err = x86Register(sc); err != nil {
			return err
		}
		hasBase = true
	case ',':
	default:
		return sc.errorf("a base register %REG")
	}
	if sc.eat(',') {
		sc.skipSpace()
		if sc.peek() != '%' {
			return sc.errorf("an index register")
		}
		if index, err = x86Register(sc); err != nil {
			return err
		}
		hasIndex = true
		if sc.eat(',') {
			sc.skipSpace()
			at := sc.pos
			v, err := sc.magnitude()
			if err != nil {
				return err
			}
			switch v {
			case 1, 2, 4, 8:
				scale = int(v)
			default:
				sc.pos = at
				return sc.errorf("scale 1, 2, 4 or 8")
			}
		}
	}
	if err := sc.expect(')'); err != nil {
		return err
	}
	if !hasBase {
		return errAbsolute // (,%rax,8): a table at an absolute address
	}
	if sc.isPC(base.Name) || gotoff {
		if hasIndex {
			return errSymExpr // no instruction encodes rip with an index
		}
		a.Kind, a.Reg, a.Offset, a.Symbol = PCRel, base, off, sym
		return nil
	}
	if sym != "" {
		return errSymBase
	}
	a.Reg, a.Offset = base, off
	a.Kind = Mem
	if hasIndex {
		a.Kind, a.Index, a.Scale = SIB, index, scale
	}
	return nil
}

// x86Register consumes '%' and a register name.
func x86Register(sc *scanner) (Register, error) {
	sc.pos++ // '%'
	name := sc.word()
	if name == "" {
		return Register{}, sc.errorf("a register name after '%'")
	}
	r, _, err := sc.register(name)
	return r, err
}

// x86Disp consumes the displacement before '(': a sum of numbers and at
// most one symbol, possibly sym@GOTOFF, with its addend wrapping like the
// assembler's 64-bit arithmetic. It returns an empty symbol and 0 when the
// operand starts with '('.
func x86Disp(sc *scanner) (off int64, sym string, gotoff bool, err error) {
	sc.skipSpace()
	if sc.peek() == '(' {
		return 0, "", false, nil
	}
	for {
		neg := false
		sc.skipSpace()
		if c := sc.peek(); c == '+' || c == '-' {
			neg = c == '-'
			sc.pos++
			sc.skipSpace()
		}
		switch c := sc.peek(); {
		case isDigit(c):
			v, err := sc.magnitude()
			if err != nil {
				return 0, "", false, err
			}
			if neg {
				v = -v
			}
			off += int64(v)
		case isWordStart(c):
			name := sc.word()
			if sc.peek() == '@' {
				// sym@GOTOFF(%ebx) is i386 PIC code's way to address a
				// static variable: the GOT pointer plus the distance
				// from the GOT, i.e. the symbol's address, like
				// sym(%rip). Other operators (@GOT, @GOTPCREL, @tpoff)
				// need the GOT or TLS block: unsupported.
				sc.pos++
				if sc.word() != "GOTOFF" {
					return 0, "", false, errReloc
				}
				gotoff = true
			}
			if sym != "" || neg {
				return 0, "", false, errSymExpr
			}
			sym = name
		default:
			return 0, "", false, sc.errorf("a number or a symbol")
		}
		sc.skipSpace()
		if c := sc.peek(); c != '+' && c != '-' {
			return off, sym, gotoff, nil
		}
	}
}

// isPC reports whether name is the program counter as an address base.
func (sc *scanner) isPC(name string) bool { return contains(sc.p.g.pc, name) }

// x8664PC are the program counter's names as an x86-64 address base
// (eip with the addr32 prefix).
var x8664PC = []string{"rip", "eip"}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func appendX86(b []byte, a *Arg) []byte {
	switch a.Kind {
	case Const:
		b = append(b, '$')
		return strconv.AppendInt(b, a.Value, 10)
	case Reg:
		return append(append(b, '%'), a.Reg.Name...)
	case PCRel:
		if a.Symbol != "" && !(a.Machine == elf.EM_X86_64 && contains(x8664PC, a.Reg.Name)) {
			b = append(b, a.Symbol...)
			b = append(b, "@GOTOFF"...)
			b = appendAddend(b, a.Offset)
		} else {
			b = appendSymbolic(b, a.Symbol, a.Offset)
		}
		b = append(b, "(%"...)
		b = append(b, a.Reg.Name...)
		return append(b, ')')
	case Mem, SIB:
		if a.Offset != 0 {
			b = strconv.AppendInt(b, a.Offset, 10)
		}
		b = append(b, "(%"...)
		b = append(b, a.Reg.Name...)
		if a.Kind == SIB {
			b = append(b, ",%"...)
			b = append(b, a.Index.Name...)
			b = append(b, ',')
			b = strconv.AppendInt(b, int64(a.Scale), 10)
		}
		return append(b, ')')
	}
	return append(b, a.Operand...)
}

// appendSymbolic writes "sym+off", "sym-off", "sym" or "off".
func appendSymbolic(b []byte, sym string, off int64) []byte {
	if sym == "" {
		if off == 0 {
			return b
		}
		return strconv.AppendInt(b, off, 10)
	}
	return appendAddend(append(b, sym...), off)
}

// appendAddend writes "+off", "-off" or nothing for 0. The magnitude is
// written unsigned so that math.MinInt64 round-trips.
func appendAddend(b []byte, off int64) []byte {
	switch {
	case off > 0:
		b = append(b, '+')
		b = strconv.AppendInt(b, off, 10)
	case off < 0:
		b = append(b, '-')
		b = strconv.AppendUint(b, uint64(-off), 10)
	}
	return b
}
