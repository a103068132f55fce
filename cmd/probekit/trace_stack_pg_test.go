package main

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/probekit/probekit/internal/test/testkit"
)

// A PostgreSQL backend at query__start, with --stack=cfi: postgres keeps
// frame pointers, libc (at the bottom, __libc_start_call_main) does not.
// The walk goes from exec_simple_query through PostgresMain, ServerLoop
// (BackendStartup and BackendRun, static and called once, are inlined in
// it), PostmasterMain and main (where gdb's bt of a backend ends, with
// the same frames below PostgresMain) into libc and out to _start. The
// backend was forked by the postmaster, so its stack below PostgresMain
// is the postmaster's at the fork. Debian strips postgres's .symtab (its
// static functions are named only by the postgresql-15-dbgsym package,
// not installed), so exec_simple_query and ServerLoop are frames of
// postgres without a name.
func TestTraceStackPostgres(t *testing.T) {
	testkit.RequireKernel(t)
	c := startPostgres(t)
	pm := c.postmaster
	out, errOut := c.trace(t, func(*testkit.Buffer) {
		if err := c.psql("select 4242 as probekit_stack"); err != nil {
			t.Fatal(err)
		}
	}, "--stack=cfi", postgresBin+"/postgres:postgresql:query__start")
	// From the probe's function outwards, "" for the static functions.
	want := []string{"", "PostgresMain", "", "PostmasterMain", "main",
		"__libc_start_call_main", "__libc_start_main_impl", "_start"}
	found := false
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if !strings.Contains(line, `"name":"query__start"`) {
			continue
		}
		var h stackHit
		if err := json.Unmarshal([]byte(line), &h); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		if h.PID == pm.Process.Pid {
			t.Errorf("query__start in the postmaster itself: %s", line)
		}
		var named []string
		for _, f := range h.Stack {
			named = append(named, f.Function)
			if o := filepath.Base(f.Object); o != "postgres" && o != "libc.so.6" {
				t.Errorf("frame %+v in neither postgres nor libc", f)
			}
		}
		if !slices.Equal(named, want) {
			t.Errorf("--stack=cfi of a backend at query__start: frames %q, want %q", named, want)
		}
		found = true
	}
	if !found {
		t.Fatalf("no query__start hit with a stack in\n%s\n%s", out, errOut)
	}
}
