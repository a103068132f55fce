package features

import (
	"os"
	"testing"

	"github.com/probekit/probekit/internal/test/testkit"
)

func TestMain(m *testing.M) { os.Exit(testkit.RunWithLeakCheck(m)) }

// Every feature is there on a kernel at least as new as its first
// release (Since); a probe answering "no" there is a probe bug.
func TestFeaturesPresent(t *testing.T) {
	testkit.RequireKernel(t)
	for f := Feature(0); f < numFeatures; f++ {
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
