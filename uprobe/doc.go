// Package uprobe attaches BPF programs to functions of user-space
// programs: C and C++ functions (malloc in libc, libuv's uv_* in Node.js)
// and Go functions, at their entry and at their return.
//
//	err := uprobe.Prepare(spec) // the CollectionSpec, before loading it
//	...
//	bin, err := uprobe.Open("libc.so.6") // a path, a program on PATH or a library name
//	defer bin.Close()
//	l, err := bin.Entry("malloc", coll.Programs["on_malloc"], &uprobe.Options{PID: pid})
//	defer l.Close()
//
// # Symbols
//
// Open parses an ELF file once, through the hardened reader
// (internal/safeelf: bounded reads, names left in the string tables, no
// panics); OpenProcess opens the file a process sees at a path inside its
// root (absolute symlinks and ".." stay in its container) or by the base
// name of an object it maps, and filters probes to that process by
// default. FunctionAt finds the function holding an address. Functions come
// from .symtab and .dynsym, merged (one entry per name and address, with
// the symbol version only .dynsym carries), so Function accepts malloc,
// malloc@@GLIBC_2.2.5 (the default version) and realpath@GLIBC_2.2.5 (a
// compat version). A bare name picks the default version, then the only
// global definition; anything else is ErrAmbiguous, listing the
// candidates. C++ names are the mangled ones (no demangler in the standard
// library, and guessing a demangled match would be worse than an error);
// Functions takes globs over names ('*' crosses '/' and '.', '[' is
// literal because C++ names contain it).
//
// A stripped file (Debian's libc, any distribution binary) has lost its
// .symtab and with it the static functions. Open and OpenProcess then read
// the .symtab of its separate debug file, when one is installed (package
// debuginfo: by build ID under /usr/lib/debug, or by its CRC-checked
// .gnu_debuglink; for OpenProcess inside the process's root first), so
// that _int_malloc is a function of libc once libc6-dbg is installed. The
// debug file comes from the same build, so its symbol values are the
// file's addresses. Only local files are read: opening a binary never
// waits on a debuginfod server.
//
// Params gives a function's parameters from the DWARF of the file or of
// that debug file (debuginfo.Signatures): name, type, and the register
// or stack slot holding each at the entry, what a program attached there
// reads.
//
// Symbols that are not functions get ErrNotFunction rather than a probe on
// data: objects, TLS, and IFUNC resolvers (glibc's memcpy is one: a probe
// there fires once, at relocation time, never on calls).
//
// A Go binary built with -ldflags=-s has no .symtab, but the runtime's
// function table .gopclntab survives, read with debug/gosym. Since Go 1.18
// its entries are relative to runtime.text, which is not the start of
// .text in cgo binaries (C code comes first), so the value is read from
// the table header, and in a PIE, where that word is left 0 for the
// dynamic loader, from the addend of the R_*_RELATIVE relocation that
// fills it.
//
// Addresses become file offsets (what the kernel takes) through the
// PT_LOAD segment holding them: offset = vaddr - p_vaddr + p_offset, per
// segment, never one delta for the file; an address outside every
// executable segment is an error, not a guess.
//
// # Return probes and Go
//
// A kernel uretprobe replaces the return address on the stack with the
// address of a trampoline. The Go runtime reads return addresses when it
// grows (copies) a goroutine stack, unwinds for a panic, a traceback or
// the garbage collector's stack scan; one that points outside Go code is
// fatal ("unexpected return pc", golang/go#22008, #27077). So on a Go
// binary Return does not use uretprobes: it decodes the function with
// golang.org/x/arch (x86asm or arm64asm, chosen by the file's e_machine,
// not the host) and puts an ordinary uprobe on each return instruction.
// The program then runs just before the RET, with the results still in
// the return registers (RAX, RBX, ... on amd64 under Go's register ABI).
// Uretprobe on a Go binary fails with ErrGoUretprobe unless
// Options.AllowUretprobeOnGo says otherwise.
//
// RET-site probes are also offered for native code (Options.ReturnSites)
// because uretprobes have a second hazard: on x86-64 since Linux 6.11
// the trampoline enters the kernel through a new uretprobe() syscall, and
// a process whose seccomp filter predates it is killed with SIGSYS when
// the probed function returns (systemd/systemd#34615). RET-site probes use
// only the breakpoint. Their limits: a function that tail-calls (a JMP out
// of it, listed as TailCall by ReturnSites) returns through another
// function's RET, and longjmp or a Go panic leaves without any RET.
//
// # The scanner
//
// ReturnSites decodes a function from its first byte. ENDBR64/ENDBR32,
// which x86asm v0.33.0 takes for a 1-byte instruction, are stepped over as
// the 4 bytes they are, and VZEROUPPER/VZEROALL, whose length x86asm
// overstates when a REX byte follows, are given their true length; tests
// compare every instruction length and every RET with objdump over the
// Go runtime and all of libc. Bytes the decoder does not know never fail
// the whole scan: on arm64 the unknown 4-byte word is skipped; on x86 the
// scan resumes at the next byte, but since it cannot know it is aligned
// again, every site after the first gap is marked Uncertain and Return
// refuses such a function (ErrUncertainSite): a breakpoint in the middle
// of an instruction corrupts the target. Options.Offset (a probe inside a
// function) is checked the same way.
//
// Entry probes on Go functions sit after the stack check. The prologue of
// a function with a frame compares the stack pointer with the goroutine's
// stack guard and, when the stack is too small or the goroutine is asked
// to yield, runtime.morestack grows or moves the stack and restarts the
// function at its first instruction: a probe there fires again for the
// same call (about 70 extra hits in 41,803 calls of the test's recursion).
// After the check it fires once per call, with the arguments still in
// their registers and the stack pointer of the entry. The prologue shapes
// are recognised by decoding (prologue.go, checked against objdump for
// every function of the amd64 and arm64 fixtures);
// Options.FunctionStart asks for the first instruction.
//
// # Attaching
//
// Function probes attach through package attach, the core USDT probes use
// too: a probe with several sites (Return on Go: one per RET) becomes one
// uprobe_multi link (Linux 6.6 with the PID-filter fix) or one perf-event
// uprobe per site on older kernels. The kernel fixes a program's attach
// type at load, so Prepare (the same call as usdt.Prepare) runs on the
// CollectionSpec before loading, and the attach later asks the same cached
// feature probe: no mode is carried by hand. A program loaded without
// Prepare on a uprobe_multi kernel is refused with ErrNotPrepared before
// anything attaches; there is no silent fallback. uprobe_multi attaches
// hundreds of sites in a millisecond and detaches them in one step; each
// perf-event link takes tens of milliseconds to close.
//
// Entries and Returns attach many functions (a Functions glob) through one
// attachment, each with its own cookie (Options.FunctionCookie): one
// uprobe_multi link for thousands of functions, where Entry per function
// would make a link each.
//
// Attach is all-or-nothing: if one site fails, the links made so far are
// closed before the error returns. The returned *Link (the same type as
// usdt's) releases every site on Close, joins their errors and is
// idempotent. A file built for another architecture is refused
// (attach.ErrForeignMachine).
//
// A Binary holds its file open (procmaps' target model: opened once, a
// regular file, without blocking, inside the process's root for
// OpenProcess): code is read from that descriptor and the kernel is given
// /proc/self/fd/N of it, so a file renamed or replaced after Open changes
// nothing. Close releases it; a closed Binary attaches nothing.
package uprobe
