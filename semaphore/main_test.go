package semaphore

import (
	"os"
	"testing"

	"github.com/probekit/probekit/internal/test/testkit"
)

func TestMain(m *testing.M) {
	if os.Getenv(execChildEnv) != "" {
		execChild()
	}
	code := testkit.RunWithLeakCheck(m)
	if code == 0 && Outstanding() != 0 {
		// Every test releases what it activates.
		os.Stderr.WriteString("semaphore: activations left outstanding\n")
		code = 1
	}
	os.Exit(code)
}
