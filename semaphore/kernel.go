package semaphore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"sync/atomic"

	"github.com/cilium/ebpf"
)

// refCtrFormat exists when the uprobe PMU takes a reference counter
// offset (Linux 4.20, commits 1cc33161a83d and a6ca88b241d5); it reads
// "config:32-63".
const refCtrFormat = "/sys/bus/event_source/devices/uprobe/format/ref_ctr_offset"

var probeRefCtr = sync.OnceValues(func() (bool, error) {
	_, err := os.Stat(refCtrFormat)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	}
	return false, err
})

// forcedOff counts ForceNoKernelRefCtr calls not yet restored.
var forcedOff atomic.Int32

// HaveKernelRefCtr reports whether the kernel manages USDT semaphores
// itself (uprobe ref_ctr_offset, Linux 4.20): nil if so, an error
// wrapping ebpf.ErrNotSupported if not. The answer is probed once and
// cached.
func HaveKernelRefCtr() error {
	if forcedOff.Load() > 0 {
		return fmt.Errorf("uprobe ref_ctr_offset: %w (disabled by ForceNoKernelRefCtr)", ebpf.ErrNotSupported)
	}
	ok, err := probeRefCtr()
	if err != nil {
		return fmt.Errorf("probe uprobe ref_ctr_offset (%s): %w", refCtrFormat, err)
	}
	if !ok {
		return fmt.Errorf("uprobe ref_ctr_offset: %w (needs Linux 4.20; %s is missing)", ebpf.ErrNotSupported, refCtrFormat)
	}
	return nil
}

// KernelRefCtrSupported is HaveKernelRefCtr as a bool.
func KernelRefCtrSupported() bool { return HaveKernelRefCtr() == nil }

// ForceNoKernelRefCtr makes HaveKernelRefCtr report "not supported" until
// restore is called, so that tests exercise the user-space fallback on a
// kernel that has ref_ctr_offset. Calls nest; it is safe for concurrent
// use, but affects the whole process.
func ForceNoKernelRefCtr() (restore func()) {
	forcedOff.Add(1)
	var once sync.Once
	return func() { once.Do(func() { forcedOff.Add(-1) }) }
}
