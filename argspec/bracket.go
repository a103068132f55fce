package argspec

import (
	"debug/elf"
	"strconv"
)

// arm64, arm (32-bit) and loongarch64 operands, bracketed addresses:
//
//	IMM, #IMM                      constant   4@5 (arm64), 4@#5 (arm)
//	REG                            register   8@x22, -4@r4, -1@$r4
//	[REG], [REG, IMM], [REG, #IMM] memory     8@[sp, 112], -4@[fp, #96]
//	[REG, REG[, lsl N]]            SIB        -1@[x0, x1]
//
// loongarch writes registers with a '$' sigil ("$r12", "$sp"), which
// Register.Name drops. Relocation operators ("#:lo12:sym"), writeback
// ("[x0, 8]!") and extended index registers ("[x0, w1, sxtw]") are
// Unsupported.

func parseBracket(sc *scanner, a *Arg) error {
	c := sc.peek()
	if c != '[' {
		if c == '#' || c == '-' || c == '+' || isDigit(c) {
			v, err := bracketImm(sc)
			if err != nil {
				return err
			}
			a.Kind, a.Value = Const, v
			return nil
		}
		r, zero, err := bracketRegister(sc)
		if err != nil {
			return err
		}
		if zero {
			a.Kind, a.Value = Const, 0
			return nil
		}
		a.Kind, a.Reg = Reg, r
		return nil
	}

	sc.pos++ // '['
	sc.skipSpace()
	base, zero, err := bracketRegister(sc)
	if err != nil {
		return err
	}
	if zero {
		return errAbsolute
	}
	a.Kind, a.Reg = Mem, base
	if !sc.eat(']') {
		if !sc.eat(',') {
			return sc.errorf("',' or ']'")
		}
		sc.skipSpace()
		if c := sc.peek(); c == '#' || c == '-' || c == '+' || isDigit(c) {
			if a.Offset, err = bracketImm(sc); err != nil {
				return err
			}
		} else {
			if err := bracketIndex(sc, a); err != nil {
				return err
			}
		}
		if err := sc.expect(']'); err != nil {
			return err
		}
	}
	if sc.eat('!') {
		return errWriteback
	}
	return nil
}

// bracketImm consumes an immediate with an optional '#'.
func bracketImm(sc *scanner) (int64, error) {
	if sc.peek() == '#' {
		sc.pos++
		sc.skipSpace()
		if sc.peek() == ':' { // #:lo12:sym, #:got_lo12:sym
			return 0, errReloc
		}
	}
	return sc.number()
}

// bracketIndex consumes the index register of [base, index[, lsl N]].
func bracketIndex(sc *scanner, a *Arg) error {
	index, zero, err := bracketRegister(sc)
	if err != nil {
		return err
	}
	if zero {
		return nil // [x0, xzr] is [x0]
	}
	a.Kind, a.Index, a.Scale = SIB, index, 1
	if !sc.eat(',') {
		return nil
	}
	sc.skipSpace()
	if op := sc.word(); op != "lsl" {
		return errExtend // sxtw, uxtw, asr, ...
	}
	sc.skipSpace()
	if sc.peek() == '#' {
		sc.pos++
	}
	sc.skipSpace()
	n, err := sc.magnitude()
	if err != nil {
		return err
	}
	if n > 3 {
		return errExtend // a scale the BPF spec cannot express
	}
	a.Scale = 1 << n
	return nil
}

// bracketRegister consumes a register name, with loongarch's optional '$'.
func bracketRegister(sc *scanner) (Register, bool, error) {
	if sc.peek() == '$' && sc.p.g.machine == elf.EM_LOONGARCH {
		sc.pos++
	}
	name := sc.word()
	if name == "" {
		return Register{}, false, sc.errorf("a register name")
	}
	return sc.register(name)
}

func appendBracket(b []byte, a *Arg) []byte {
	switch a.Kind {
	case Const:
		if a.Machine == elf.EM_ARM {
			b = append(b, '#')
		}
		return strconv.AppendInt(b, a.Value, 10)
	case Reg:
		return appendBracketReg(b, a, a.Reg)
	case Mem, SIB:
		b = append(b, '[')
		b = appendBracketReg(b, a, a.Reg)
		if a.Kind == SIB {
			b = append(b, ", "...)
			b = appendBracketReg(b, a, a.Index)
			if a.Scale > 1 {
				b = append(b, ", lsl "...)
				b = strconv.AppendInt(b, int64(log2(a.Scale)), 10)
			}
		} else if a.Offset != 0 {
			b = append(b, ", "...)
			if a.Machine == elf.EM_ARM {
				b = append(b, '#')
			}
			b = strconv.AppendInt(b, a.Offset, 10)
		}
		return append(b, ']')
	}
	return append(b, a.Operand...)
}

func appendBracketReg(b []byte, a *Arg, r Register) []byte {
	if a.Machine == elf.EM_LOONGARCH {
		b = append(b, '$')
	}
	return append(b, r.Name...)
}

func log2(n int) int {
	k := 0
	for n > 1 {
		n >>= 1
		k++
	}
	return k
}
