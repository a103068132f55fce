package semaphore

import (
	"fmt"
	"math"

	"golang.org/x/sys/unix"

	"github.com/probekit/probekit/procmaps"
)

// Value reads the 2-byte semaphore counter at runtime address addr in
// proc through /proc/PID/mem, whoever raised it (the kernel's
// ref_ctr_offset, this package, another tracer). A counter at 0 while a
// uprobe with ref_ctr_offset is installed on its probe means someone
// lowered it behind the kernel's back: a tracer whose read-modify-write
// of the counter raced the kernel's update wrote back a stale value.
func Value(proc *procmaps.Process, addr uint64) (uint16, error) {
	if addr > math.MaxInt64-2 {
		return 0, fmt.Errorf("semaphore at %#x in %v: %w", addr, proc, ErrNotWritable)
	}
	fd, path, err := openMem(proc, unix.O_RDONLY)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	return readCounter(proc, fd, path, addr)
}
