package procmaps

import (
	"os/exec"
	"slices"
	"testing"

	"github.com/probekit/probekit/internal/test/testkit"
)

// benchSleepers is how many extra processes BenchmarkFindPIDs starts, to
// model a machine with a few hundred processes.
const benchSleepers = 300

func BenchmarkFindPIDs(b *testing.B) {
	var sleepers []*exec.Cmd
	defer func() {
		for _, c := range sleepers {
			c.Process.Kill()
			c.Wait()
		}
	}()
	for range benchSleepers {
		c := exec.Command("sleep", "1000")
		if err := c.Start(); err != nil {
			b.Fatal(err)
		}
		sleepers = append(sleepers, c)
	}
	var users []int
	for range 2 {
		p, err := testkit.StartProcess(fixturePath(b, "usdt_lib_user"))
		if err != nil {
			b.Fatal(err)
		}
		defer p.Stop()
		users = append(users, p.PID())
	}
	lib := fixturePath(b, "libusdt_lib.so")
	procs, err := listPIDs()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		pids, _, err := FindPIDs(lib)
		if err != nil {
			b.Fatal(err)
		}
		for _, u := range users {
			if !slices.Contains(pids, u) {
				b.Fatalf("pid %d not found in %v", u, pids)
			}
		}
	}
	b.ReportMetric(float64(len(procs)), "procs")
}
