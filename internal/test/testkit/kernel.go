package testkit

import (
	"os"
	"testing"
)

// RequireKernelEnv is the environment variable CI sets so that a kernel
// test that cannot run fails instead of skipping.
const RequireKernelEnv = "PROBEKIT_REQUIRE_KERNEL"

// KernelRequired reports whether kernel tests must run (CI).
func KernelRequired() bool { return os.Getenv(RequireKernelEnv) == "1" }

// RequireKernel skips t when the machine cannot load BPF programs and
// attach uprobes (not root), or fails it when PROBEKIT_REQUIRE_KERNEL=1.
func RequireKernel(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() == 0 {
		return
	}
	Unavailable(tb, "kernel test needs root (euid %d)", os.Geteuid())
}

// Unavailable skips tb with a reason, or fails it when
// PROBEKIT_REQUIRE_KERNEL=1: for a prerequisite of a kernel test that is
// missing (a tool, a feature CI is known to have).
func Unavailable(tb testing.TB, format string, args ...any) {
	tb.Helper()
	if KernelRequired() {
		tb.Fatalf("required by %s=1 but unavailable: "+format, append([]any{RequireKernelEnv}, args...)...)
	}
	tb.Skipf(format, args...)
}
