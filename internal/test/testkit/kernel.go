package testkit

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
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

// KernelVersion is a kernel release's major.minor.patch.
type KernelVersion [3]int

func (v KernelVersion) String() string { return fmt.Sprintf("%d.%d.%d", v[0], v[1], v[2]) }

// Less reports whether v is older than w.
func (v KernelVersion) Less(w KernelVersion) bool {
	for i := range v {
		if v[i] != w[i] {
			return v[i] < w[i]
		}
	}
	return false
}

// ParseKernelVersion reads the leading "major.minor[.patch]" of a release
// string ("5.10.0-32-amd64", "6.12.117+deb13-amd64", "6.18").
func ParseKernelVersion(s string) (KernelVersion, error) {
	var v KernelVersion
	end := strings.IndexFunc(s, func(r rune) bool { return r != '.' && (r < '0' || r > '9') })
	if end < 0 {
		end = len(s)
	}
	parts := strings.Split(s[:end], ".")
	if len(parts) < 2 || len(parts) > 3 {
		return v, fmt.Errorf("kernel version %q: want major.minor[.patch]", s)
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil {
			return v, fmt.Errorf("kernel version %q: %w", s, err)
		}
		v[i] = n
	}
	return v, nil
}

// RunningKernel is the version of the kernel the test runs on (uname).
var RunningKernel = sync.OnceValues(func() (KernelVersion, error) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return KernelVersion{}, err
	}
	return ParseKernelVersion(unix.ByteSliceToString(u.Release[:]))
})

// KernelOlderThan reports whether the running kernel is older than
// version ("5.15"). It panics on a malformed version: that is a bug in
// the test.
func KernelOlderThan(version string) bool {
	want, err := ParseKernelVersion(version)
	if err != nil {
		panic(err)
	}
	have, err := RunningKernel()
	if err != nil {
		panic(err)
	}
	return have.Less(want)
}

// SkipOnOldKernel skips tb, naming feature, when the running kernel is
// older than version (the first release with feature), and returns
// otherwise: on a kernel that should have the feature the test goes on,
// and fails if the feature is missing. Such a skip is allowed under
// PROBEKIT_REQUIRE_KERNEL=1: it is the kernel's limit, not the machine's.
func SkipOnOldKernel(tb testing.TB, version, feature string) {
	tb.Helper()
	if KernelOlderThan(version) {
		have, _ := RunningKernel()
		tb.Skipf("%s needs Linux %s; running %s", feature, version, have)
	}
}

// NeedFeature is for a test of a feature that has no fallback: it skips
// tb when have is false on a kernel older than version (the feature's
// first release), and fails it when have is false on a newer kernel or
// the probe erred (err).
func NeedFeature(tb testing.TB, have bool, err error, version, feature string) {
	tb.Helper()
	if err != nil {
		tb.Fatalf("probing %s: %v", feature, err)
	}
	if have {
		return
	}
	SkipOnOldKernel(tb, version, feature)
	running, _ := RunningKernel()
	tb.Fatalf("%s reported missing on Linux %s (it is in Linux %s)", feature, running, version)
}

// MissingFeature is for a test that found feature (first released in
// version) missing and goes on to test the fallback: it fails tb when the
// running kernel is version or newer, where the feature must be there.
func MissingFeature(tb testing.TB, version, feature string) {
	tb.Helper()
	if !KernelOlderThan(version) {
		running, _ := RunningKernel()
		tb.Fatalf("%s reported missing on Linux %s (it is in Linux %s)", feature, running, version)
	}
}
