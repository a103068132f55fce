// Package interp puts the frames of interpreted programs (Python today;
// Ruby, Node and Java are meant to plug in the same way) into native
// stacks.
//
// A stack walk in BPF records two things for a thread: its native
// frames (package bpfunwind's walk) and, where the process runs a known
// interpreter, that interpreter's frames as Raw words, innermost first.
// Naming a Raw frame (its function, file and line) happens in user space,
// by the runtime's Process, from the process's memory. Merge then puts
// each run of interpreted frames directly inside the native frame of
// the interpreter's eval loop that runs it (that frame stays), so that a
// stack reads C → Python → C as the program ran.
package interp

// Raw is one interpreted frame as the BPF walk records it: 16 bytes,
// innermost first. Its meaning is the runtime's; for CPython, Code is
// the code object's address and Instr the offset of the instruction
// executing from the start of its bytecode, in bytes.
type Raw struct {
	Code  uint64
	Instr uint32
	Flags uint32
}

// Flags of a Raw frame, set by the BPF walk.
const (
	// FlagRunEnd marks the outermost frame of a run that one native
	// eval-loop frame executes (CPython 3.11's is_entry, 3.12's frame
	// after a C-stack shim; every frame before 3.11, where each Python
	// call is its own eval-loop call).
	FlagRunEnd uint32 = 1 << 0
	// FlagBad marks a frame the walk could not read; it ends the
	// interpreted part.
	FlagBad uint32 = 1 << 1
)

// Frame is one interpreted frame, named.
type Frame struct {
	// Func is the function's qualified name (CPython's co_qualname from
	// 3.11, co_name before).
	Func string
	// File is the source file as the code object names it.
	File string
	// Line is the line executing, 0 when unknown.
	Line int
	// Runtime names the runtime: "python".
	Runtime string
	// Unreadable is set, and the other fields may be empty, when the
	// frame could not be read or named; it says why.
	Unreadable string
}
