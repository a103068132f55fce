package features

import (
	"errors"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/probekit/probekit/internal/test/testkit"
)

func TestMain(m *testing.M) { os.Exit(testkit.RunWithLeakCheck(m)) }

// Every feature is there on a kernel at least as new as its first
// release (Since); a probe answering "no" there is a probe bug.
func TestFeaturesPresent(t *testing.T) {
	testkit.RequireKernel(t)
	for f := Feature(0); f < numFeatures; f++ {
		if f == EntryCaller {
			continue // a behaviour with no one first release: TestEntryCaller
		}
		t.Run(f.String(), func(t *testing.T) {
			ok, err := Have(f)
			testkit.NeedFeature(t, ok, err, f.Since(), f.String())
		})
	}
}

// RefCtr (Linux 4.20) is on every kernel probekit supports.
func TestForceOff(t *testing.T) {
	testkit.RequireKernel(t)
	restore := ForceOff(RefCtr)
	if ok, _ := Have(RefCtr); ok {
		t.Fatal("forced off, still reported")
	}
	restore()
	if ok, err := Have(RefCtr); !ok || err != nil {
		t.Fatalf("after restore: %v %v", ok, err)
	}
}

// Check agrees with Have, and a missing feature's error wraps
// ebpf.ErrNotSupported and names the feature with its release.
func TestCheck(t *testing.T) {
	testkit.RequireKernel(t)
	for f := Feature(0); f < numFeatures; f++ {
		ok, err := Have(f)
		if err != nil {
			t.Fatalf("Have(%s): %v", f, err)
		}
		if got := Check(f); (got == nil) != ok {
			t.Errorf("Check(%s) = %v, Have = %v", f, got, ok)
		}
	}
	restore := ForceOff(RefCtr)
	err := Check(RefCtr)
	restore()
	if !errors.Is(err, ebpf.ErrNotSupported) {
		t.Fatalf("forced off: %v, want ErrNotSupported", err)
	}
	for _, want := range []string{"ref_ctr_offset", "4.20", "forced off"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("forced off: %q lacks %q", err, want)
		}
	}
	if err := Check(RefCtr); err != nil {
		t.Fatalf("after restore: %v", err)
	}
}

// The entry-caller probe runs (it fires a uprobe in this process) and
// answers as measured: Debian's 5.10 does not put the caller in the
// stack itself, 6.12 and later do.
func TestEntryCaller(t *testing.T) {
	testkit.RequireKernel(t)
	adds, err := probeEntryCaller()
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case runtime.GOARCH != "amd64":
		if adds {
			t.Error("reported off x86-64")
		}
	case testkit.KernelOlderThan("5.11"):
		if adds {
			t.Error("reported on a 5.10 kernel")
		}
	case !testkit.KernelOlderThan("6.12"):
		if !adds {
			t.Error("not reported on 6.12 or later")
		}
	}
	t.Logf("the kernel adds the caller: %v", adds)
}
