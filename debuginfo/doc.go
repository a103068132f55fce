// Package debuginfo finds the debug information of an ELF object: the
// file that holds its DWARF sections and its full symbol table (.symtab,
// with the static functions strip removes).
//
// Distributions ship binaries stripped and their debug information apart:
// Debian's -dbg and -dbgsym packages install it under /usr/lib/debug,
// named by build ID; others name it by .gnu_debuglink; debuginfod servers
// serve it over HTTP by build ID. Find looks in the order gdb does
// (gdb manual, "Separate Debug Files"):
//
//  1. the object itself, when it carries .debug_info;
//  2. DIR/.build-id/NN/REST.debug for each debug directory (default
//     /usr/lib/debug), NN the first byte of the build ID in lowercase
//     hex, REST the others;
//  3. the name in .gnu_debuglink, which must be a base name, in the
//     object's directory, in its .debug subdirectory and under
//     DIR/<the object's directory>/; the CRC-32 the link records must
//     match the candidate's contents;
//  4. debuginfod, when the user turned it on (DEBUGINFOD_URLS or
//     Options.DebuginfodURLs): GET URL/buildid/HEX/debuginfo, cached in
//     the elfutils client's layout so that gdb, elfutils and probekit
//     share downloads;
//  5. the object itself again when it has a .symtab but no DWARF.
//
// A candidate whose build ID differs from the object's, or whose CRC does
// not match the link, is never used: it is skipped and reported as a
// warning (Options.Warn, File.Warnings, and the error when nothing is
// found).
//
// For a process (Options.Process), every path is first opened inside the
// process's root, as a file read on its behalf (procmaps.Process's
// OpenOwned: no final symlink followed, a regular file owned by the
// process's user or root), then on the host: a container's debug files
// live in its image, the host's in the host's /usr/lib/debug.
//
// The static functions of a stripped object come from the debug file's
// .symtab; packages uprobe and symbolize join them to the object's own
// table (see Functions). Without a debug file they come from the
// object's MiniDebugInfo if it has one (MiniDebugInfo: Fedora's and
// CentOS's binaries keep an xz-compressed .symtab of the functions
// .dynsym lacks in .gnu_debugdata), so a container built from those
// distributions names its static functions with no debug package.
//
// # Parameters
//
// Signatures (OpenSignaturesELF) gives the parameters of the function
// whose entry is an address, from DWARF: name, type (spelled as C, C++
// or Go writes it, with its kind and size), and where each is at the
// entry: a register by its DWARF number (RegisterName), a stack slot
// from the CFA, or not available. Locations come from exprlocs and from
// location lists, DWARF 4's .debug_loc and DWARF 5's .debug_loclists
// (read here: debug/dwarf reads none); for a C or C++ function on x86-64
// whose DWARF locates a parameter only after the prologue (gcc -O0), the
// System V calling convention gives its place at the entry
// (Location.FromABI). A tracer reads the value there at a uprobe on the
// function's entry; uprobe.Binary.Params does the lookup for a probed
// function, through its debug file when it is stripped. DWARF that dwz
// shrank refers to a supplementary file for the names and types it
// moved there (.gnu_debugaltlink, DWARF 5's .debug_sup); OpenSup finds
// and opens it, for SignaturesOptions.Sup (OpenSignaturesELFWith) as for
// LinesOptions.Sup.
package debuginfo
