package semaphore

import (
	"errors"
	"os"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/probekit/probekit/internal/features"
)

func TestKernelRefCtr(t *testing.T) {
	_, statErr := os.Stat(features.RefCtrFormat)
	if got := KernelRefCtrSupported(); got != (statErr == nil) {
		t.Fatalf("KernelRefCtrSupported() = %v, stat %s: %v", got, features.RefCtrFormat, statErr)
	}
	if statErr != nil {
		if err := HaveKernelRefCtr(); !errors.Is(err, ebpf.ErrNotSupported) {
			t.Fatalf("HaveKernelRefCtr: %v", err)
		}
	}
	before := KernelRefCtrSupported()
	restore1 := ForceNoKernelRefCtr()
	restore2 := ForceNoKernelRefCtr()
	if err := HaveKernelRefCtr(); !errors.Is(err, ebpf.ErrNotSupported) || KernelRefCtrSupported() {
		t.Fatalf("forced off: %v", err)
	}
	restore1()
	restore1() // once only
	if KernelRefCtrSupported() {
		t.Fatal("nested force lifted by the first restore")
	}
	restore2()
	if got := KernelRefCtrSupported(); got != before {
		t.Fatalf("after restore: %v, want %v", got, before)
	}
}
