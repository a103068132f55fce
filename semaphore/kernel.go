package semaphore

import (
	"fmt"

	"github.com/probekit/probekit/internal/features"
)

// HaveKernelRefCtr reports whether the kernel manages USDT semaphores
// itself (uprobe ref_ctr_offset, Linux 4.20): nil if so, an error
// wrapping ebpf.ErrNotSupported if not. The answer is probed once and
// cached.
func HaveKernelRefCtr() error {
	if err := features.Check(features.RefCtr); err != nil {
		return fmt.Errorf("%w (%s)", err, features.RefCtrFormat)
	}
	return nil
}

// KernelRefCtrSupported is HaveKernelRefCtr as a bool.
func KernelRefCtrSupported() bool { return HaveKernelRefCtr() == nil }

// ForceNoKernelRefCtr makes HaveKernelRefCtr report "not supported" until
// restore is called, so that tests exercise the user-space fallback on a
// kernel that has ref_ctr_offset. Calls nest; it is safe for concurrent
// use, but affects the whole process (the attachers see it too).
func ForceNoKernelRefCtr() (restore func()) {
	return features.ForceOff(features.RefCtr)
}
