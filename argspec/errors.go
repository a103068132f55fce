package argspec

import (
	"debug/elf"
	"errors"
	"fmt"
)

// ErrUnsupportedMachine indicates an ELF machine whose operand grammar
// argspec does not know; Supported reports it beforehand.
var ErrUnsupportedMachine = errors.New("unsupported ELF machine")

// maxFound bounds the text a SyntaxError quotes, so that an error about a
// hostile megabyte-long note stays one readable line.
const maxFound = 24

// maxQuotedSpec bounds how much of the argument string an error message
// repeats: twelve real operands fit in about 150 bytes.
const maxQuotedSpec = 200

// SyntaxError is a malformed argument string: which argument, where, and
// what the grammar expected there. An operand that is well formed but
// cannot be read by a BPF program is not a SyntaxError but an Arg of kind
// Unsupported.
type SyntaxError struct {
	// Machine is the architecture whose grammar was applied.
	Machine elf.Machine
	// Spec is the whole argument string.
	Spec string
	// Arg is the 1-based index of the argument the error is in.
	Arg int
	// Column is the 1-based byte column in Spec where parsing stopped.
	Column int
	// Expected says what the grammar wanted at Column.
	Expected string
	// Found is the text at Column (at most a few bytes), empty at the end
	// of the string.
	Found string
}

func (e *SyntaxError) Error() string {
	found := "end of string"
	if e.Found != "" {
		found = fmt.Sprintf("%q", e.Found)
	}
	spec := e.Spec
	if len(spec) > maxQuotedSpec {
		spec = spec[:maxQuotedSpec] + "..."
	}
	return fmt.Sprintf("argspec: %v argument %d, column %d: expected %s, found %s (in %q)",
		e.Machine, e.Arg, e.Column, e.Expected, found, spec)
}
