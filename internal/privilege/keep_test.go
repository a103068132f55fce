package privilege

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/probekit/probekit/internal/test/testkit"
)

const keepHelperEnv = "PROBEKIT_PRIVILEGE_KEEP_HELPER"

// TestKeep: in a process of its own holding every capability (root),
// Keep(LoadBPF, OtherUser) leaves exactly the table's capabilities for
// them on this kernel in every thread, effective and permitted, and says
// which it dropped.
func TestKeep(t *testing.T) {
	testkit.RequireKernel(t) // root: every capability to drop from
	// Built without cgo (and so without -race), as probekit is: a cgo
	// build's threads cannot all be changed.
	bin := filepath.Join(t.TempDir(), "privilege.test")
	build := exec.Command("go", "test", "-c", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go test -c: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "-test.run=^TestKeepHelper$", "-test.v")
	cmd.Env = append(os.Environ(), keepHelperEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestKeepHelper") {
		t.Fatalf("helper: %v\n%s", err, out)
	}
}

func TestKeepHelper(t *testing.T) {
	if os.Getenv(keepHelperEnv) == "" {
		t.Skip("run by TestKeep")
	}
	want, err := Required(LoadBPF, OtherUser)
	if err != nil {
		t.Fatal(err)
	}
	before, err := readCapabilities()
	if err != nil {
		t.Fatal(err)
	}
	// Threads of the Go runtime's, each with its own sets.
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() { defer wg.Done(); os.ReadFile("/proc/self/status") }()
	}
	wg.Wait()
	kept, dropped, err := Keep(LoadBPF, OtherUser)
	if err != nil {
		t.Fatal(err)
	}
	if kept != SetOf(want...) || dropped != before.Permitted&^kept || dropped == 0 {
		t.Fatalf("kept %v, dropped %v; want %v kept, the rest of %v dropped", kept, dropped, want, before.Permitted)
	}
	tasks, err := filepath.Glob("/proc/self/task/*/status")
	if err != nil || len(tasks) < 2 {
		t.Fatalf("threads: %v, %v", tasks, err)
	}
	for _, task := range tasks {
		b, err := os.ReadFile(task)
		if err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{"CapEff:", "CapPrm:"} {
			if got := statusSet(t, b, key); got != kept {
				t.Errorf("%s %s %v, want %v", task, key, got, kept)
			}
		}
	}
	// Again: nothing left to drop.
	if k, d, err := Keep(LoadBPF, OtherUser); err != nil || k != kept || d != 0 {
		t.Errorf("second Keep: %v, %v, %v", k, d, err)
	}
}

// statusSet is the capability set of a /proc/PID/status line.
func statusSet(t *testing.T, status []byte, key string) Set {
	t.Helper()
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, key); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return Set(n)
		}
	}
	t.Fatalf("no %s", key)
	return 0
}
