// Package procmaps reads what a process has mapped: the file-backed
// objects of /proc/PID/maps with their identity (device, inode), a path
// the tracer can open from outside the process's mount namespace, and the
// translation between file offsets and runtime addresses. It also finds
// the processes that map a given file. A process is identified by PID and
// start time, so a reused PID is detected.
package procmaps
