// Package semaphore activates USDT semaphores: the 2-byte counters a
// program tests before computing a probe's arguments. The kernel manages
// them through uprobe ref_ctr_offset (Linux 4.20) by default; a user-space
// fallback raises and lowers the counter in /proc/PID/mem for kernels
// without it, counting references so that every increment is undone.
package semaphore
