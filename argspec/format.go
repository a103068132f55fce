package argspec

import "strconv"

// String returns the argument in the canonical syntax of its Machine:
// "[-]SIZE[f]@OPERAND" with no optional whitespace, decimal numbers, and
// one spelling per operand kind (x86 "sym+8(%rip)", arm64 "[sp, 112]",
// arm "#5", ppc "i5" and "%r3"). Parse(a.Machine, a.String()) returns a
// again, except that its Operand is the canonical text. An Unsupported
// argument keeps its operand as written, so that it parses back to the
// same Unsupported argument.
func (a Arg) String() string {
	return string(a.appendTo(make([]byte, 0, 24)))
}

// Format joins the canonical form of args with single spaces: the
// argument string of a note, as String gives each argument.
func Format(args []Arg) string {
	b := make([]byte, 0, 16*len(args))
	for i := range args {
		if i > 0 {
			b = append(b, ' ')
		}
		b = args[i].appendTo(b)
	}
	return string(b)
}

func (a *Arg) appendTo(b []byte) []byte {
	if a.Signed {
		b = append(b, '-')
	}
	b = strconv.AppendInt(b, int64(a.Size), 10)
	if a.Float {
		b = append(b, 'f')
	}
	b = append(b, '@')
	g := grammars[a.Machine]
	if g == nil || a.Kind == Unsupported {
		return append(b, a.Operand...)
	}
	return g.format(b, a)
}
