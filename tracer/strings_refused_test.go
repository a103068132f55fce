package tracer

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/probekit/probekit/record"
)

// TestSleepableRefusedWarning: programs the kernel would not load
// sleepable (record.Objects.SleepableRefusal) give a warning that says
// strings are read without faulting and why: the verifier's limit for
// E2BIG (Debian's 6.1 with the whole-stack walk), else the refusal's
// text; none when they loaded sleepable or without being asked to.
func TestSleepableRefusedWarning(t *testing.T) {
	if w := sleepableRefused(&record.Objects{}); w != "" {
		t.Errorf("no refusal: warning %q", w)
	}
	e2big := fmt.Errorf("load the trace program: %w", unix.E2BIG)
	w := sleepableRefused(&record.Objects{SleepableRefusal: e2big})
	for _, want := range []string{"refused to load the trace programs sleepable", "1,000,000 instructions", "without faulting", "<unreadable: not resident>"} {
		if !strings.Contains(w, want) {
			t.Errorf("E2BIG: warning %q lacks %q", w, want)
		}
	}
	other := sleepableRefused(&record.Objects{SleepableRefusal: errors.New("invalid argument")})
	if !strings.Contains(other, "(invalid argument)") {
		t.Errorf("other refusal: warning %q does not give it", other)
	}
}
