package main

import (
	"strings"
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

	const query = "select 4242 + 1"
	out, errOut := c.trace(t, func(out *testkit.Buffer) {
		if err := psql(query); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(20 * time.Second); !strings.Contains(out.String(), query); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("query not seen within 20s:\n%s", out.String())
			}
		}
	}, "--str", "1", postgresBin+"/postgres:postgresql:query__start")
	for _, l := range decodeFollow(t, out) {
		if l.Kind == "usdt" && len(l.Args) == 1 && strings.Contains(string(l.Args[0]), query) {
			if l.PID == pm.Process.Pid {
				t.Fatalf("the query ran in the postmaster (pid %d), not in a backend", l.PID)
			}
			return
		}
	}
	t.Fatalf("no query__start hit with %q:\n%s\n%s", query, out, errOut)
}
