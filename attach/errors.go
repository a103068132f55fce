package attach

import "errors"

var (
	// ErrNotPrepared indicates the program was loaded without Prepare, so its
	// attach type does not match the links this kernel gets (uprobe_multi
	// needs the attach type at load time).
	ErrNotPrepared = errors.New("program was not prepared for probekit (call Prepare on its CollectionSpec before loading it)")

	// ErrRefCtrConflict indicates the kernel refused a USDT semaphore because
	// another uprobe on the same file offset was created with a different
	// reference counter offset (the kernel logs "ref_ctr_offset
	// mismatch"): usually another tracer attached to the probe without
	// its semaphore.
	ErrRefCtrConflict = errors.New("another uprobe on this site uses another semaphore offset (or none): " +
		"probably another tracer attached there without the USDT semaphore; " +
		"find it with `bpftool perf list` (perf-event uprobes: path and offset), `bpftool link list` (uprobe_multi links) " +
		"or in /sys/kernel/tracing/uprobe_events, and detach it or attach the same way")
)
