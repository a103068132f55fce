// Package semaphore activates USDT semaphores: the 2-byte counters a
// program tests before computing a probe's arguments. The kernel manages
// them through uprobe ref_ctr_offset (Linux 4.20) by default; a user-space
// fallback raises and lowers the counter in /proc/PID/mem for kernels
// without it, counting references so that every increment is undone.
//
// # Kernel-managed (the default)
//
// With ref_ctr_offset the kernel raises the counter in every process
// where the uprobe is installed, including processes started later, and
// lowers it when the uprobe goes, even if the tracer crashes
// (iovisor/bcc#3135). The attacher passes the semaphore's file offset as
// the uprobe's reference counter; this package only says whether the
// kernel can (HaveKernelRefCtr, probed once through the uprobe PMU's
// format directory). ForceNoKernelRefCtr makes tests take the fallback.
//
// # User space (the fallback)
//
// Activate adds one to the counter at a runtime address of one process
// (procmaps computes it: Object.Address(fileOffset, procmaps.Write)),
// and Activation.Release subtracts it again, exactly once. Each
// activation counts, so two activations of one semaphore read 2, then 1,
// then 0. Activations are recorded per process identity (PID and start
// time) and address in a Registry (a package-level one by default), which
// serialises our writes and says what is still held (Held, Outstanding).
//
// Before writing, the address is checked to lie in a writable mapping and
// the process's identity is checked after opening its memory, so a
// reused PID is never written to. Activate records the Site of the
// counter (the file, device and inode, and file offset mapped at the
// address; the process image, by its argument and environment
// addresses) and every later write first checks it is unchanged: a
// release after the object was dlclose'd and its address reused, or
// after the process exec'd, writes nothing (ErrSiteChanged, which
// Release does not report). RestoreSite does the same for a counter
// the kernel raised. Releasing in a process that has exited
// is not an error. Errors opening /proc/PID/mem wrap os.ErrPermission
// (root or ptrace access needed) or match os.ErrNotExist and
// procmaps.ErrProcessGone (the process exited).
//
// The fallback's limits, and why it is not the default: it needs a PID,
// misses processes started later, leaves the counter raised if the
// tracer dies, and races with another tracer writing the same counter.
package semaphore
