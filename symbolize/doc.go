// Package symbolize names the functions that hold code addresses: the
// runtime addresses of a live process (a user stack from BPF, a sample),
// or the link-time addresses of an ELF file (what nm and addr2line show).
// It is pure Go and reads everything itself.
//
//	s := symbolize.New(&symbolize.Options{Demangle: true})
//	p, err := s.Process(pid)
//	...
//	frames, err := p.Symbolize(stack) // []Frame, in order
//	for _, f := range frames {
//		fmt.Println(f) // 0x55d0c3a1f1d5 main+0x5 (/usr/bin/prog)
//	}
//
// Each Frame has the object (the file's path as the process maps it),
// the function, the offset in it, and the source file and line. Where the
// compiler inlined calls, an address has a frame per function of its
// inline chain, innermost first, as addr2line -f -i prints them: the
// inlined ones have Inlined set and, as File and Line, the innermost the
// address's position and each outer one the call site of the call one
// level in.
//
// # Source lines and inlined calls
//
// For C, C++ and Rust they come from DWARF (debuginfo.Lines: DWARF 2 to 5,
// line tables and DW_TAG_inlined_subroutine trees), in the file itself or
// in the debug file debuginfo.Find finds for it (by build ID, by
// .gnu_debuglink with its CRC checked, from debuginfod when turned on;
// inside the process's root first). A stripped file's static functions
// come from its debug file's .symtab. The DWARF sections are read with the
// table; a compilation unit's line table and tree only when an address
// needs them. For Go they come from .gopclntab: the line table and the
// inline trees the runtime's tracebacks use (runtime.CallersFrames).
// Options.NoDebugInfo reads only the files' own symbol tables.
//
// # Line index cache
//
// Decompressing and decoding DWARF costs far more than the lookups of a
// short run: libc6-dbg's 3.8 MB of compressed sections are 8.6 MB
// decompressed, and 10,000 random libc addresses read nearly all of its
// 2,063 units. So the first Symbolizer that reads an object's DWARF
// writes what it gives every address (function, file, line, the inline
// chain with each call's file and line, and the symbol table's function)
// into a line index (debuginfo.LineIndex), one file per build ID in the
// per-user cache directory: Options.IndexDir, else $PROBEKIT_CACHE_DIR,
// else $XDG_CACHE_HOME/probekit, else ~/.cache/probekit, under lines/.
// Later Symbolizers, in this process or another, map that file and read
// neither the DWARF nor the symbol tables: a whole probekit symbolize -e
// libc.so.6 run then takes about 35 ms of CPU, most of it the process's
// start. Their frames are the same, byte for byte (TestLineIndexFrames).
//
// An index is used only for the same DWARF: it names the object's build
// ID, the debug file's build ID and size, the supplementary (dwz) file's
// identity and size, and the format version; any other is rebuilt. An
// object without a build ID, and Go (whose lines come from .gopclntab),
// get none. The directory is created 0700 and the files 0600, written to
// a temporary file and renamed into place, so runs at the same time
// neither mix nor half-read indexes. A directory or file not owned by
// the user, or writable by others, is refused with a warning
// (Options.DebugInfo.Warn) and the DWARF read; a corrupt index (checked
// in full when mapped: checksum, bounds, every reference) is said in a
// warning and rebuilt. Options.NoIndex turns it off. The first run pays
// for the build: about 0.3 s more for libc, whose index is 4.1 MB.
//
// # Stacks
//
// Process.Stack names a call stack (an instruction pointer, then return
// addresses) with one rule: a return address is looked up at the byte
// before it, inside the call, so its frames are the caller's function and
// the call's file and line; the frames keep the return address as Address,
// and Offset reaches it. Stacks keeps a Process per PID for a tracer.
//
// # Processes
//
// A Process keeps a snapshot of /proc/PID/maps. A runtime address is
// turned into a file offset through the mapping that holds it, and the
// offset into a link-time address through the file's PT_LOAD segments, so
// PIE executables and shared libraries loaded anywhere are named. An
// address outside every mapping makes it read the maps again (a library
// loaded since), at most every 10 ms; Process.Refresh forces it. The
// process is identified by PID and start time: if it exits or its PID is
// reused, Symbolize fails with an error matching procmaps.ErrProcessGone or
// procmaps.ErrProcessChanged rather than return names. Stacks recorded
// while the process ran and named after it may have exited (a tracer
// draining its buffers) go through SymbolizeRecorded, which names them
// from what was read while the process was known, after Process.Preload
// has read the tables of all its code.
//
// Files are opened as attaching opens them (procmaps.Process.OpenObject):
// inside the process's root, so a process in a container is symbolized
// from its own files, with the identity (device and inode) the maps give
// checked on the opened file. A file deleted or replaced since it was
// mapped is read through /proc/PID/map_files; a different file that now
// has the path is never used.
//
// Anonymous executable memory is JIT code. A runtime that writes a perf map
// (node --perf-basic-prof, Java's perf-map-agent) names it in
// /tmp/perf-PID.map, with PID as the process sees it in its own PID
// namespace; that file is read inside the process's root as a regular file
// without blocking (see ParsePerfMap for its format and ceilings), and
// read again (what was appended) when an address is not in it, at most
// every 50 ms. Executable shared anonymous memory and memfds (files that
// are not ELF) are looked up in the perf map too. The [vdso] mapping is
// named from the vDSO image read from the process's memory. Other memory
// that no file backs is named by its pseudo name in maps ("[heap]",
// "[stack]", "[anon:NAME]") or "[anon]", with no function.
//
// # Tables
//
// The function table of a file (from .symtab and .dynsym, or from
// .gopclntab for a stripped Go program) is read once per file identity and
// shared by every Process and File of a Symbolizer: two containers mapping
// one library share a table, two files with one path do not. Memory is
// bounded by Options.MaxTableBytes (DefaultMaxTableBytes, 512 MiB of
// estimated table memory): beyond it the least recently used tables are
// dropped, by the CLOCK algorithm (an approximation of LRU).
//
// Lookups take no lock: a Process reads an immutable maps snapshot and
// table pointers through atomic loads, and the cache is a sync.Map. A
// table that has served 16Ki lookups gets an address index (function
// boundaries as 32-bit offsets with a bucket array), after which a lookup
// takes about 15 ns and allocates nothing (BenchmarkFileWarm).
// The DWARF sections of a file are charged with its table, plus the
// ceiling of its unit tables (MaxTableBytes/16, at least 1 MiB).
package symbolize
