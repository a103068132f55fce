package argspec

import (
	"strconv"
	"strings"
)

// String returns the argument in the canonical syntax of its Machine:
// "[-]SIZE[f]@OPERAND" with no optional whitespace, decimal numbers, and
// one spelling per operand kind (x86 "sym+8(%rip)", arm64 "[sp, 112]",
// arm "#5", ppc "i5" and "%r3"). Parse(a.Machine, a.String()) returns a
// again, except that its Operand is the canonical text. An Unsupported
// argument keeps its operand as written, so that it parses back to the
// same Unsupported argument.
func (a Arg) String() string {
	var buf [64]byte
	return string(a.appendTo(buf[:0]))
}

// Format joins the canonical form of args with single spaces: the
// argument string of a note, as String gives each argument.
func Format(args []Arg) string {
	var sb strings.Builder
	sb.Grow(16 * len(args)) // "-4@-1204(%rbp)" is typical
	var buf [64]byte
	for i := range args {
		if i > 0 {
			sb.WriteByte(' ')
		}
		sb.Write(args[i].appendTo(buf[:0]))
	}
	return sb.String()
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
