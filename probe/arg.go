package probe

import (
	"errors"
	"fmt"
	"strconv"
)

// MaxArg is the highest argument number: a USDT probe has at most 12
// arguments (sys/sdt.h's STAP_PROBE12), and a record carries 12 values.
const MaxArg = 12

// ArgNum names one argument of a probe, numbered from 1 as everywhere a
// user writes one: `probekit trace --str 1,2`, `--hist 2`, `--by arg 1`,
// filters (`arg2 > 100`), the exporter's YAML (`arg: 2`), and the Go
// fields and accessors that take an ArgNum (tracer.Config.Strs and
// HistValue, tracer.Hit.Str and Value, exporter.Label.Arg and
// Metric.Value). Arg(1) is the first argument.
//
// ArgNum is a struct so that the compiler refuses a bare number where an
// argument is expected: `Arg: 0`, the habit of a 0-based index, does not
// compile; Arg(n) or Ret() does. The zero ArgNum is no argument: a field
// that needs one refuses it. Slices of values, such as record.Event's
// Args, stay indexed from 0 as Go slices are (ArgNum.Index converts).
type ArgNum struct {
	// n is the number given to Arg, from 1 when valid; kind says which
	// of none, an argument or the return value a is.
	n    int
	kind argKind
}

type argKind uint8

const (
	argNone argKind = iota
	argN
	argRet
)

// Arg returns argument n, counting from 1. An n outside 1 to MaxArg
// gives an ArgNum that Check, and every field taking it, refuses with n
// named.
func Arg(n int) ArgNum { return ArgNum{n: n, kind: argN} }

// Ret returns the return value of a uretprobe, as `--hist ret` and the
// YAML's `value: ret` name it.
func Ret() ArgNum { return ArgNum{kind: argRet} }

// IsZero reports whether a is the zero ArgNum: no argument.
func (a ArgNum) IsZero() bool { return a.kind == argNone }

// IsRet reports whether a is Ret().
func (a ArgNum) IsRet() bool { return a.kind == argRet }

func (a ArgNum) valid() bool { return a.kind == argN && a.n >= 1 && a.n <= MaxArg }

// Num returns a's number, from 1; 0 for Ret, the zero ArgNum or an
// argument out of range.
func (a ArgNum) Num() int {
	if !a.valid() {
		return 0
	}
	return a.n
}

// Index returns a's position in a record's values, counting from 0:
// Num()-1 for an argument, 0 for Ret (a uretprobe's record carries its
// return value first), -1 for the zero ArgNum or an argument out of
// range.
func (a ArgNum) Index() int {
	switch {
	case a.kind == argRet:
		return 0
	case a.valid():
		return a.n - 1
	}
	return -1
}

// Check returns nil for an argument from 1 to MaxArg or Ret, else an
// error that says why.
func (a ArgNum) Check() error {
	switch {
	case a.kind == argRet || a.valid():
		return nil
	case a.kind == argNone:
		return fmt.Errorf("no argument: want probe.Arg(1) to probe.Arg(%d)", MaxArg)
	case a.n == 0:
		return errors.New("argument 0: arguments are numbered from 1 (probe.Arg(1) is the first)")
	}
	return fmt.Errorf("argument %d: want 1 to %d", a.n, MaxArg)
}

// String returns "arg N", "ret", or "no argument".
func (a ArgNum) String() string {
	switch a.kind {
	case argRet:
		return "ret"
	case argN:
		return "arg " + strconv.Itoa(a.n)
	}
	return "no argument"
}
