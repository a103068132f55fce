package features

import (
	"os"
	"testing"

	"github.com/probekit/probekit/internal/test/testkit"
)

func TestMain(m *testing.M) { os.Exit(testkit.RunWithLeakCheck(m)) }

// The project's machines run Linux 6.18: every feature is present there,
// so a probe answering "no" is a probe bug.
func TestFeaturesPresent(t *testing.T) {
	testkit.RequireKernel(t)
	for f := Feature(0); f < numFeatures; f++ {
		ok, err := Have(f)
		if err != nil {
			t.Errorf("%v: %v", f, err)
		} else if !ok {
			t.Errorf("%v: reported missing on a 6.x kernel", f)
		}
	}
}

func TestForceOff(t *testing.T) {
	testkit.RequireKernel(t)
	restore := ForceOff(Cookie)
	if ok, _ := Have(Cookie); ok {
		t.Fatal("forced off, still reported")
	}
	restore()
	if ok, err := Have(Cookie); !ok || err != nil {
		t.Fatalf("after restore: %v %v", ok, err)
	}
}
