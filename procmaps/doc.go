// Package procmaps reads what a process has mapped: the file-backed
// objects of /proc/PID/maps with their identity (device, inode), a path
// the tracer can open from outside the process's mount namespace, and the
// translation between file offsets and runtime addresses. It also finds
// the processes that map a given file. A process is identified by PID and
// start time, so a reused PID is detected.
//
// # Processes
//
// Open(pid) records the process's start time (field 22 of
// /proc/PID/stat); every later read is followed by a check that the PID
// still has that start time, so a method fails with ErrProcessChanged
// when the PID was reused and ErrProcessGone (which also matches
// os.ErrNotExist) when the process exited, rather than describe another
// process. A zombie counts as gone: its memory is released.
//
// Launch starts a command stopped right after its execve, for probes to
// be attached before it runs; Finish lets it run or kills it, and until
// then it dies with the tracer (PTRACE_O_EXITKILL).
//
// # Maps
//
// ParseMaps and ParseLine read the kernel's format themselves rather than
// through prometheus/procfs, whose parser collapses runs of spaces in
// paths and fails the whole file on one bad line: here a bad line is
// counted and skipped, paths keep their spaces, " (deleted)" becomes a
// flag, and pseudo names ([vdso], [anon:NAME], anon_inode:…) are kept on
// the Mapping but are not objects. procfs is used for /proc/PID/stat.
//
// # Objects and addresses
//
// Process.Objects groups the file-backed mappings into Objects. A file
// offset becomes a runtime address through the mapping of the same file
// that holds it (Object.Address: start − offset + the file offset), restricted by
// permissions because one file page is often mapped twice (read-only
// data and the RELRO start of the data segment). Object.FileOffset is the
// inverse.
//
// # Containers
//
// Maps paths are as the target's mount namespace sees them.
// Process.OpenInRoot resolves a path with openat2(RESOLVE_IN_ROOT |
// RESOLVE_NO_MAGICLINKS) on the process's root, so absolute symlinks and
// ".." stay in the container; Process.OpenObject also checks device and
// inode against maps and falls back to /proc/PID/map_files for deleted or
// unreachable files. FindPIDs and FindProcesses match by device and
// inode, so a container that names a file differently is still found;
// they count the processes whose maps they may not read.
package procmaps
