package semaphore

import "errors"

var (
	// ErrMisaligned indicates a semaphore address that is not 2-aligned. USDT
	// semaphores are aligned unsigned shorts (sys/sdt.h), and the kernel
	// refuses a misaligned ref_ctr_offset (iovisor/bcc#5269); such an
	// address is a translation bug, and writing there would corrupt the
	// target.
	ErrMisaligned = errors.New("semaphore address is not 2-aligned")

	// ErrNotWritable indicates the address is not in a writable mapping of the
	// process, so it cannot be a semaphore (they live in the read-write
	// data segment, section .probes).
	ErrNotWritable = errors.New("semaphore address is not in a writable mapping")

	// ErrOverflow indicates the counter is at 65535 and cannot be raised.
	ErrOverflow = errors.New("semaphore counter would overflow")

	// ErrUnbalanced indicates a release found the counter at 0, so someone else
	// lowered it (another tracer, or the program itself); it is left at 0.
	ErrUnbalanced = errors.New("semaphore counter is already 0")
)
