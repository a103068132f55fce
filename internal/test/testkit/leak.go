package testkit

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// openFDs returns the descriptors of this process with what they point at.
func openFDs() (map[string]string, error) {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil, err
	}
	fds := make(map[string]string, len(entries))
	for _, e := range entries {
		target, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil {
			continue // the fd ReadDir itself used, closed by now
		}
		fds[e.Name()] = target
	}
	return fds, nil
}

// RunWithLeakCheck is a TestMain body: it runs the tests and fails the
// package when descriptors opened during the run are still open after it.
// The run's probekit cache (PROBEKIT_CACHE_DIR, symbolize's line
// indexes) is a temporary directory, removed after, for the tests and
// the commands they start: no test writes to the user's cache.
//
//	func TestMain(m *testing.M) { os.Exit(testkit.RunWithLeakCheck(m)) }
func RunWithLeakCheck(m *testing.M) int {
	cache, err := os.MkdirTemp("", "probekit-test-cache")
	if err != nil {
		fmt.Fprintln(os.Stderr, "testkit: cache directory:", err)
		return 1
	}
	defer os.RemoveAll(cache)
	os.Setenv("PROBEKIT_CACHE_DIR", cache)
	before, err := openFDs()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testkit: cannot list fds:", err)
		return 1
	}
	code := m.Run()
	if code != 0 {
		return code
	}
	// Descriptors closed by finalizers or exiting goroutines may lag;
	// give them a second before calling it a leak.
	var leaked []string
	for deadline := time.Now().Add(time.Second); ; {
		after, err := openFDs()
		if err != nil {
			fmt.Fprintln(os.Stderr, "testkit: cannot list fds:", err)
			return 1
		}
		leaked = leaked[:0]
		for fd, target := range after {
			if _, ok := before[fd]; !ok && !ignoredFD(target) {
				leaked = append(leaked, fd+" -> "+target)
			}
		}
		if len(leaked) == 0 {
			return 0
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	fmt.Fprintf(os.Stderr, "testkit: %d file descriptor(s) leaked by the tests:\n\t%s\n",
		len(leaked), strings.Join(leaked, "\n\t"))
	return 1
}

// ignoredFD reports descriptors the Go runtime keeps for itself.
func ignoredFD(target string) bool {
	return strings.HasPrefix(target, "anon_inode:[eventpoll]") ||
		strings.HasPrefix(target, "anon_inode:[eventfd]") ||
		strings.HasPrefix(target, "anon_inode:[pidfd]")
}
