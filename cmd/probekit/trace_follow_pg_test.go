package main

import (
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/probekit/probekit/internal/test/testkit"
)

// TestTraceFollowPostgres: -f -p <postmaster> sees the queries of backends
// the postmaster forks after the trace started.
func TestTraceFollowPostgres(t *testing.T) {
	testkit.RequireKernel(t)
	c := startPostgres(t)
	pm := c.postmaster
	psql := c.psql

	var out, errOut testkit.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run([]string{"trace", "--json", "-f", "--str", "1", "-p", strconv.Itoa(pm.Process.Pid), postgresBin + "/postgres:postgresql:query__start"}, &out, &errOut)
	}()
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(out.String(), `"kind":"attach","pid":`+strconv.Itoa(pm.Process.Pid)); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("postmaster not attached within 20s: %s", errOut.String())
		}
	}
	const query = "select 4242 + 1"
	if err := psql(query); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(out.String(), query); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("query not seen within 20s:\n%s\n%s", out.String(), errOut.String())
		}
	}
	// Signal only: the trace follows the postmaster with ptrace from this
	// process, so waiting for it here (c.stop, at cleanup) must come after
	// the trace let it go.
	pm.Process.Signal(syscall.SIGINT)
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("trace did not end with the postmaster")
	}
	for _, l := range decodeFollow(t, out.String()) {
		if l.Kind == "usdt" && len(l.Args) == 1 && strings.Contains(string(l.Args[0]), query) {
			if l.PID == pm.Process.Pid {
				t.Fatalf("the query ran in the postmaster (pid %d), not in a backend", l.PID)
			}
			return
		}
	}
	t.Fatalf("no query__start hit with %q:\n%s", query, out.String())
}
