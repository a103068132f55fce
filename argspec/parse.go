package argspec

import (
	"debug/elf"
	"fmt"
	"math"
)

// MaxArgs is the largest number of arguments a note carries: sys/sdt.h
// stops at STAP_PROBE12 and libbpf's BPF side has twelve argument slots
// (BPF_USDT_MAX_ARG_CNT).
const MaxArgs = 12

// Parse decodes the argument string of a USDT note (the text after the
// provider and probe names, e.g. "-4@%edi 8@-8(%rbp)") with the operand
// grammar of machine, the e_machine of the ELF file the note came from:
// never the host's.
//
// A string that is empty or only whitespace has no arguments: Parse
// returns nil, nil. A malformed string returns a *SyntaxError naming the
// argument and column. A well-formed operand that a BPF program cannot read
// (a SIMD register, a relocation operator, an unknown register) does not
// fail the string: its Arg has Kind Unsupported and a Reason, and the other
// arguments decode normally.
//
// Parse allocates once, the returned slice; register names and symbols are
// substrings of s.
func Parse(machine elf.Machine, s string) ([]Arg, error) {
	g := grammars[machine]
	if g == nil {
		return nil, fmt.Errorf("argspec: %v: %w (supported: x86-64, i386, arm64, arm, s390x, riscv64, ppc64, loongarch64)",
			machine, ErrUnsupportedMachine)
	}
	p := parser{g: g, s: s}
	n, err := p.count()
	if err != nil || n == 0 {
		return nil, err
	}
	args := make([]Arg, n)
	pos := 0
	for i := range args {
		start, end, next, err := p.split(i+1, pos)
		if err != nil {
			return nil, err
		}
		if err := p.arg(i+1, start, end, &args[i]); err != nil {
			return nil, err
		}
		pos = next
	}
	return args, nil
}

// parser holds one Parse call's input.
type parser struct {
	g *grammar
	s string
}

// count validates the argument boundaries and counts the arguments, so
// that Parse allocates its result once and exactly.
func (p *parser) count() (int, error) {
	n, pos := 0, 0
	for {
		start, _, next, err := p.split(n+1, pos)
		if err != nil {
			return 0, err
		}
		if start == len(p.s) {
			return n, nil
		}
		n++
		if n > MaxArgs {
			return 0, p.errorAt(n, start, fmt.Sprintf("at most %d arguments", MaxArgs))
		}
		pos = next
	}
}

// split finds the argument that starts at or after pos: it returns the
// bounds [start, end) of its text and where the next one may start. When no
// argument is left, start == len(s).
//
// Arguments are separated by whitespace, but whitespace also occurs inside
// an operand ("8@[sp, 112]", and libbpf accepts "-4@-8 (%rbp)"), so a
// whitespace run ends the argument only outside brackets and when what
// follows it starts a new argument ("[-]SIZE[f]@"). Every iteration moves
// j forward, so split terminates on any input (bcc looped forever on
// operands it did not understand: iovisor/bcc#3649, #3861).
func (p *parser) split(argn, pos int) (start, end, next int, err error) {
	s := p.s
	start = skipSpace(s, pos)
	if start == len(s) {
		return start, start, start, nil
	}
	depth := 0
	j := start
	for j < len(s) {
		switch c := s[j]; {
		case c == '(' || c == '[':
			depth++
			j++
		case c == ')' || c == ']':
			if depth == 0 {
				return 0, 0, 0, p.errorAt(argn, j, "no unmatched '"+string(c)+"'")
			}
			depth--
			j++
		case isSpace(c) && depth == 0:
			k := skipSpace(s, j)
			if k == len(s) || startsArg(s, k) {
				return start, j, k, nil
			}
			j = k
		default:
			j++
		}
	}
	if depth > 0 {
		return 0, 0, 0, p.errorAt(argn, j, "closing ')' or ']'")
	}
	return start, j, j, nil
}

// startsArg reports whether s[i:] begins an argument: [+-]digits[f] '@'.
// A '+' is accepted here only so that "+4@" is reported as a bad size of
// its own argument rather than as garbage after the previous operand.
func startsArg(s string, i int) bool {
	if i < len(s) && (s[i] == '-' || s[i] == '+') {
		i++
	}
	d := i
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	if i == d {
		return false
	}
	if i < len(s) && s[i] == 'f' {
		i++
	}
	i = skipSpace(s, i)
	return i < len(s) && s[i] == '@'
}

// arg decodes the argument s[start:end] into a.
func (p *parser) arg(argn, start, end int, a *Arg) error {
	s := p.s
	sc := scanner{p: p, arg: argn, pos: start, end: end}
	a.Machine = p.g.machine
	if sc.peek() == '-' {
		a.Signed = true
		sc.pos++
	}
	d := sc.pos
	size := 0
	for sc.pos < end && isDigit(s[sc.pos]) {
		if size < 100 { // stays small however many digits follow
			size = size*10 + int(s[sc.pos]-'0')
		}
		sc.pos++
	}
	if sc.pos == d {
		return sc.errorf("argument size (1, 2, 4 or 8, negative if signed)")
	}
	switch size {
	case 1, 2, 4, 8:
		a.Size = size
	default:
		sc.pos = d
		return sc.errorf("argument size 1, 2, 4 or 8")
	}
	if sc.peek() == 'f' {
		a.Float = true
		sc.pos++
	}
	sc.skipSpace()
	if sc.peek() != '@' {
		return sc.errorf("'@' after the argument size")
	}
	sc.pos++
	sc.skipSpace()
	if sc.pos == end {
		return sc.errorf("an operand after '@'")
	}
	a.Operand = s[sc.pos:end]
	err := p.g.operand(&sc, a)
	if u, ok := err.(*unsupported); ok {
		*a = Arg{
			Machine: a.Machine, Size: a.Size, Signed: a.Signed, Float: a.Float,
			Kind: Unsupported, Operand: a.Operand, Reason: u.reason,
		}
		return nil
	}
	if err != nil {
		return err
	}
	sc.skipSpace()
	if sc.pos != end {
		return sc.errorf("end of operand")
	}
	return nil
}

// errorAt builds a SyntaxError at byte offset off of the string.
func (p *parser) errorAt(argn, off int, expected string) *SyntaxError {
	found := p.s[off:]
	if len(found) > maxFound {
		found = found[:maxFound]
	}
	return &SyntaxError{
		Machine: p.g.machine, Spec: p.s, Arg: argn, Column: off + 1,
		Expected: expected, Found: found,
	}
}

// unsupported is returned by operand grammars for a well-formed operand no
// BPF program can read; arg turns it into an Arg of kind Unsupported. The
// values are package variables, so returning one does not allocate.
type unsupported struct{ reason string }

func (u *unsupported) Error() string { return u.reason }

var (
	errVector     = &unsupported{"floating-point or vector register: pt_regs holds no FP/SIMD state"}
	errUnknownReg = &unsupported{"not a general-purpose register of this architecture"}
	errHighByte   = &unsupported{"high-byte register (bits 8-15 of a slot)"}
	errSegment    = &unsupported{"segment register or segment-relative (TLS) address"}
	errReloc      = &unsupported{"assembler relocation operator: the address is known only to the linker"}
	errAbsolute   = &unsupported{"absolute address without a base register"}
	errSymBase    = &unsupported{"symbol with a register base"}
	errSymExpr    = &unsupported{"symbol expression other than symbol+constant"}
	errSymConst   = &unsupported{"address of a symbol as an immediate"}
	errWriteback  = &unsupported{"pre-indexed address with writeback"}
	errExtend     = &unsupported{"extended or shifted index register"}
	errZeroBase   = &unsupported{"base register r0 reads as 0 in a D-form address: absolute address"}
	errRegPair    = &unsupported{"64-bit value in a 32-bit register pair: the note names only the low half"}
)

// scanner walks one operand, s[pos:end].
type scanner struct {
	p        *parser
	arg      int
	pos, end int
}

func (sc *scanner) peek() byte {
	if sc.pos < sc.end {
		return sc.p.s[sc.pos]
	}
	return 0
}

// peekAt returns the byte i positions ahead, 0 past the operand.
func (sc *scanner) peekAt(i int) byte {
	if sc.pos+i < sc.end {
		return sc.p.s[sc.pos+i]
	}
	return 0
}

func (sc *scanner) skipSpace() {
	for sc.pos < sc.end && isSpace(sc.p.s[sc.pos]) {
		sc.pos++
	}
}

// eat skips whitespace and consumes c if it comes next.
func (sc *scanner) eat(c byte) bool {
	sc.skipSpace()
	if sc.peek() == c {
		sc.pos++
		return true
	}
	return false
}

// expect consumes c after optional whitespace or fails.
func (sc *scanner) expect(c byte) error {
	if sc.eat(c) {
		return nil
	}
	return sc.errorf("'" + string(c) + "'")
}

func (sc *scanner) errorf(expected string) error {
	return sc.p.errorAt(sc.arg, sc.pos, expected)
}

// word consumes an identifier-like run [A-Za-z0-9_.] (register names,
// symbols, "lsl") and returns it, empty if none.
func (sc *scanner) word() string {
	start := sc.pos
	for sc.pos < sc.end && isWordChar(sc.p.s[sc.pos]) {
		sc.pos++
	}
	return sc.p.s[start:sc.pos]
}

// magnitude consumes an unsigned decimal or 0x-prefixed hexadecimal
// number of at most 64 bits.
func (sc *scanner) magnitude() (uint64, error) {
	s := sc.p.s
	start := sc.pos
	base := uint64(10)
	if sc.peek() == '0' && (sc.peekAt(1) == 'x' || sc.peekAt(1) == 'X') && isHexDigit(sc.peekAt(2)) {
		base = 16
		sc.pos += 2
	}
	var v uint64
	digits := sc.pos
	for sc.pos < sc.end {
		d, ok := digitValue(s[sc.pos], base)
		if !ok {
			break
		}
		if v > (math.MaxUint64-d)/base {
			sc.pos = start
			return 0, sc.errorf("a number that fits in 64 bits")
		}
		v = v*base + d
		sc.pos++
	}
	if sc.pos == digits {
		return 0, sc.errorf("a number")
	}
	return v, nil
}

// number consumes an optionally signed number and returns it as 64-bit
// two's complement: "18446744073709551614" and "-2" are the same value,
// as in the assembler (GNU as reads an out-of-range decimal modulo 2^64).
func (sc *scanner) number() (int64, error) {
	neg := false
	switch sc.peek() {
	case '-':
		neg = true
		sc.pos++
	case '+':
		sc.pos++
	}
	sc.skipSpace()
	v, err := sc.magnitude()
	if err != nil {
		return 0, err
	}
	if neg {
		v = -v
	}
	return int64(v), nil
}

// register resolves a register name against the machine's table. A
// hardwired zero register reports zero; a name that is not a readable
// general-purpose register returns an *unsupported error.
func (sc *scanner) register(name string) (r Register, zero bool, err error) {
	g := sc.p.g
	if off, ok := g.regs[name]; ok {
		return Register{Name: name, Offset: off}, false, nil
	}
	if contains(g.zero, name) {
		return Register{}, true, nil
	}
	if u, ok := g.special[name]; ok {
		return Register{}, false, u
	}
	for _, v := range g.vector {
		if len(name) > len(v) && name[:len(v)] == v && isDigit(name[len(v)]) {
			return Register{}, false, errVector
		}
	}
	return Register{}, false, errUnknownReg
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

func skipSpace(s string, i int) int {
	for i < len(s) && isSpace(s[i]) {
		i++
	}
	return i
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func isHexDigit(c byte) bool {
	_, ok := digitValue(c, 16)
	return ok
}

func isLetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

// isWordStart reports whether c can start a register name or a symbol:
// C identifiers, C++ mangled names and GCC's local labels (".LC0").
func isWordStart(c byte) bool { return isLetter(c) || c == '_' || c == '.' }

func isWordChar(c byte) bool { return isWordStart(c) || isDigit(c) }

func digitValue(c byte, base uint64) (uint64, bool) {
	var d uint64
	switch {
	case '0' <= c && c <= '9':
		d = uint64(c - '0')
	case 'a' <= c && c <= 'f':
		d = uint64(c-'a') + 10
	case 'A' <= c && c <= 'F':
		d = uint64(c-'A') + 10
	default:
		return 0, false
	}
	return d, d < base
}
