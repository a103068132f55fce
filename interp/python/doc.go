// Package python reads CPython's frames: it finds the interpreter of a
// process (Find), fills the map that usdt/bpf/python.bpf.h's BPF walk of
// a thread's Python frames reads (Tables), and names the frames that
// walk recorded (Interpreter.Name) from the process's memory.
//
// # Finding the interpreter
//
// CPython is the object of the process whose .dynsym defines
// _PyRuntime: the executable when libpython is linked into it (Debian's
// /usr/bin/python3.11), or a mapped libpython3.X.so (pyenv's builds,
// programs embedding Python). The version is Py_Version (3.11+), else
// the object's name. Struct offsets come, in this order, from the
// interpreter's DWARF (in the object, or its debug file found by
// package debuginfo: build ID, debuglink, debuginfod), from
// _Py_DebugOffsets at the start of _PyRuntime (3.13+, read from the
// file), or from a table of released versions checked against DWARF in
// the tests (Interpreter.Source says which).
//
// # The BPF walk
//
// python.bpf.h finds the current thread's PyThreadState by the task's
// thread pointer (what pthread_self() returns, which CPython stores as
// PyThreadState.thread_id), so a thread that released the GIL (os.write,
// time.sleep) is found as well as the one holding it; it then follows
// the version's frame chain, innermost first, recording each frame's
// code object address and instruction offset (interp.Raw). Reads fail
// soft: a frame that cannot be read ends the Python part, marked
// interp.FlagBad.
//
// # Naming
//
// Name reads the code object (checked to be one by its type), its
// qualified name (co_qualname from 3.11, co_name before), its file and
// its line table, and finds the line of the instruction offset by the
// version's format (co_lnotab 3.8-3.9, co_linetable 3.10, the location
// table 3.11+). Code objects are cached by address and checked against
// the object found there at each use (its first line and the pointers to
// its file name and line table), as a freed object's address is reused.
// Every read is bounded by a named ceiling; strings are read only when
// compact (ASCII, latin-1, UCS-2, UCS-4).
//
// docs/python.md has the design for CPython 3.8 to 3.14.
package python
