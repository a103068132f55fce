package argspec

import "strconv"

// s390x, riscv64 and ppc64 operands, parenthesised addresses:
//
//	s390x    IMM | %rN | D(%rB) | D(%rX,%rB)       -2@-28(%r15) -8@%r0 4@71
//	riscv64  IMM | REG | OFF(REG)                  -8@-88(s0) -8@a1 4@5
//	ppc64    iIMM | N | %rN | OFF(N) | A,B         -8@i9 8@3 -4@16(6) 8@9,10
//
// On ppc a bare number is a register, not a constant. On s390 the index
// comes first in D(X,B); both are added with scale 1.

func parseS390(sc *scanner, a *Arg) error {
	switch c := sc.peek(); {
	case c == '%':
		r, err := s390Register(sc)
		if err != nil {
			return err
		}
		a.Kind, a.Reg = Reg, r
		return nil
	case c == '(':
	case c == '-' || c == '+' || isDigit(c):
		v, err := sc.number()
		if err != nil {
			return err
		}
		sc.skipSpace()
		if sc.peek() != '(' {
			a.Kind, a.Value = Const, v
			return nil
		}
		a.Offset = v
	default:
		return sc.errorf("a constant, %rN or D(%rB)")
	}
	sc.pos++ // '('
	sc.skipSpace()
	var first Register
	hasFirst := false
	if sc.peek() == '%' {
		var err error
		if first, err = s390Register(sc); err != nil {
			return err
		}
		hasFirst = true
	}
	if sc.eat(',') {
		sc.skipSpace()
		if sc.peek() != '%' {
			return sc.errorf("a base register %rN")
		}
		base, err := s390Register(sc)
		if err != nil {
			return err
		}
		a.Kind, a.Reg = Mem, base
		if hasFirst {
			a.Kind, a.Index, a.Scale = SIB, first, 1
		}
	} else {
		if !hasFirst {
			return sc.errorf("a base register %rN")
		}
		a.Kind, a.Reg = Mem, first
	}
	return sc.expect(')')
}

func s390Register(sc *scanner) (Register, error) {
	sc.pos++ // '%'
	name := sc.word()
	if name == "" {
		return Register{}, sc.errorf("a register name after '%'")
	}
	r, _, err := sc.register(name)
	return r, err
}

func appendS390(b []byte, a *Arg) []byte {
	switch a.Kind {
	case Const:
		return strconv.AppendInt(b, a.Value, 10)
	case Reg:
		return append(append(b, '%'), a.Reg.Name...)
	case Mem, SIB:
		b = strconv.AppendInt(b, a.Offset, 10)
		b = append(b, '(')
		if a.Kind == SIB {
			b = append(append(b, '%'), a.Index.Name...)
			b = append(b, ',')
		}
		b = append(append(b, '%'), a.Reg.Name...)
		return append(b, ')')
	}
	return append(b, a.Operand...)
}

func parseRISCV(sc *scanner, a *Arg) error {
	switch c := sc.peek(); {
	case c == '%': // %lo(sym)(a5), %pcrel_lo(...)
		return errReloc
	case c == '(':
	case c == '-' || c == '+' || isDigit(c):
		v, err := sc.number()
		if err != nil {
			return err
		}
		sc.skipSpace()
		if sc.peek() != '(' {
			a.Kind, a.Value = Const, v
			return nil
		}
		a.Offset = v
	case isWordStart(c):
		name := sc.word()
		if sc.eat('(') {
			return errSymBase // sym(a0)
		}
		r, zero, err := sc.register(name)
		if err != nil {
			return err
		}
		if zero {
			a.Kind, a.Value = Const, 0
			return nil
		}
		a.Kind, a.Reg = Reg, r
		return nil
	default:
		return sc.errorf("a constant, a register or OFF(REG)")
	}
	sc.pos++ // '('
	sc.skipSpace()
	name := sc.word()
	if name == "" {
		return sc.errorf("a base register")
	}
	r, zero, err := sc.register(name)
	if err != nil {
		return err
	}
	if zero {
		return errAbsolute
	}
	a.Kind, a.Reg = Mem, r
	return sc.expect(')')
}

func appendRISCV(b []byte, a *Arg) []byte {
	switch a.Kind {
	case Const:
		return strconv.AppendInt(b, a.Value, 10)
	case Reg:
		return append(b, a.Reg.Name...)
	case Mem:
		b = strconv.AppendInt(b, a.Offset, 10)
		b = append(b, '(')
		b = append(b, a.Reg.Name...)
		return append(b, ')')
	}
	return append(b, a.Operand...)
}

func parsePPC(sc *scanner, a *Arg) error {
	c := sc.peek()
	// "i" followed by a digit or a non-name character starts an immediate
	// ("i9", "i-67"); no ppc register name starts with 'i'.
	if next := sc.peekAt(1); c == 'i' && (isDigit(next) || !isWordChar(next)) {
		sc.pos++ // iNUM, i-NUM: an immediate
		v, err := sc.number()
		if err != nil {
			return err
		}
		a.Kind, a.Value = Const, v
		return nil
	}
	if c == '-' || c == '+' || isDigit(c) {
		v, err := sc.number()
		if err != nil {
			return err
		}
		sc.skipSpace()
		switch sc.peek() {
		case '(': // D-form: OFF(RA)
			sc.pos++
			sc.skipSpace()
			base, err := ppcRegister(sc)
			if err != nil {
				return err
			}
			if base.Name == "r0" {
				// The ISA reads RA=0 as the value 0, not r0.
				return errZeroBase
			}
			a.Kind, a.Reg, a.Offset = Mem, base, v
			return sc.expect(')')
		case ',':
			first, err := ppcNumberRegister(v)
			if err != nil {
				return err
			}
			return ppcIndexed(sc, a, first)
		}
		r, err := ppcNumberRegister(v)
		if err != nil {
			return err
		}
		a.Kind, a.Reg = Reg, r
		return nil
	}
	if c == '%' || isWordStart(c) {
		r, err := ppcRegister(sc)
		if err != nil {
			return err
		}
		sc.skipSpace()
		if sc.peek() == ',' {
			return ppcIndexed(sc, a, r)
		}
		a.Kind, a.Reg = Reg, r
		return nil
	}
	return sc.errorf("iIMM, a register or OFF(REG)")
}

// ppcIndexed decodes the X-form "RA,RB" (address RA+RB, where RA=0 reads
// as 0), positioned at the ','.
func ppcIndexed(sc *scanner, a *Arg, first Register) error {
	sc.pos++ // ','
	sc.skipSpace()
	second, err := ppcRegister(sc)
	if err != nil {
		return err
	}
	if first.Name == "r0" {
		a.Kind, a.Reg = Mem, second
		return nil
	}
	a.Kind, a.Reg, a.Index, a.Scale = SIB, first, second, 1
	return nil
}

// ppcRegister consumes "N", "%rN", "rN" or "%N".
func ppcRegister(sc *scanner) (Register, error) {
	if sc.peek() == '%' {
		sc.pos++
	}
	if isDigit(sc.peek()) {
		v, err := sc.magnitude()
		if err != nil {
			return Register{}, err
		}
		return ppcNumberRegister(int64(v))
	}
	name := sc.word()
	if name == "" {
		return Register{}, sc.errorf("a register")
	}
	r, _, err := sc.register(name)
	return r, err
}

func ppcNumberRegister(v int64) (Register, error) {
	if v < 0 || v >= int64(len(ppc64Names)) {
		return Register{}, errUnknownReg
	}
	name := ppc64Names[v]
	return Register{Name: name, Offset: ppc64Regs[name]}, nil
}

func appendPPC(b []byte, a *Arg) []byte {
	switch a.Kind {
	case Const:
		b = append(b, 'i')
		return strconv.AppendInt(b, a.Value, 10)
	case Reg:
		return append(append(b, '%'), a.Reg.Name...)
	case Mem:
		if a.Reg.Name == "r0" && a.Offset == 0 {
			// "0(%r0)" would read as address 0: RA=0 is the value 0.
			// The X-form "0,%r0" (from "0,0") is r0 itself.
			return append(b, "0,%r0"...)
		}
		b = strconv.AppendInt(b, a.Offset, 10)
		b = append(b, "(%"...)
		b = append(b, a.Reg.Name...)
		return append(b, ')')
	case SIB:
		b = append(append(b, '%'), a.Reg.Name...)
		b = append(b, ",%"...)
		return append(b, a.Index.Name...)
	}
	return append(b, a.Operand...)
}
