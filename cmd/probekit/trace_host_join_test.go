package main

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/probekit/probekit/internal/features"
	"github.com/probekit/probekit/internal/test/testkit"
)

// TestTraceHostJoinNewBinary: a host-wide trace of a glob target (no -p)
// attaches a binary that was not running when the trace started, when its
// first process execs, prints its join, and reports its hits (issue 36,
// item 1: the join of a new binary was a nil-pointer panic).
func TestTraceHostJoinNewBinary(t *testing.T) {
	testkit.RequireKernel(t)
	cookie, err := features.Have(features.Cookie)
	if err != nil {
		t.Fatal(err)
	}
	for _, json := range []bool{true, false} {
		t.Run("json="+strconv.FormatBool(json), func(t *testing.T) {
			// A copy of its own: no other process on the host maps it.
			bin := filepath.Join(t.TempDir(), "pkjoin_sample")
			testkit.CopyFile(t, testkit.Fixture("usdt_sample"), bin)
			args := []string{"trace", "-n", "3", filepath.Dir(bin) + "/pkjoin_*:sample:zero"}
			if json {
				args = append([]string{"trace", "--json"}, args[1:]...)
			}
			var out, errOut testkit.Buffer
			done := make(chan int, 1)
			go func() { done <- run(args, &out, &errOut) }()
			notes := func() string {
				if json {
					return out.String()
				}
				return errOut.String()
			}
			waitFor := func(what, s string) {
				t.Helper()
				for deadline := time.Now().Add(20 * time.Second); !strings.Contains(notes(), s); time.Sleep(10 * time.Millisecond) {
					select {
					case code := <-done:
						t.Fatalf("%s: trace exited %d: %s%s", what, code, out.String(), errOut.String())
					default:
					}
					if time.Now().After(deadline) {
						t.Fatalf("%s: not within 20s: %s%s", what, out.String(), errOut.String())
					}
				}
			}
			waitFor("the trace started", "missing")
			fx := testkit.Start(t, bin)
			pid := strconv.Itoa(fx.PID())
			// Without BPF cookies (5.10) a host watch attaches in each
			// process that maps the file: an attach, not a join.
			kind := "join"
			probe := ""
			if !cookie {
				kind, probe = "attach", "sample:zero"
			}
			switch {
			case json && cookie:
				waitFor("the new binary joined", `{"kind":"join","pid":`+pid+`,"file":"`+bin+`","sites":1}`)
			case json:
				waitFor("the new binary was attached", `{"kind":"attach","pid":`+pid+`,"file":"`+bin+`","probe":"sample:zero","sites":1}`)
			default:
				waitFor("the new binary joined", strings.Join(strings.Fields(kind+" "+pid+" "+bin+" "+probe), " ")+" (1 sites)\n")
			}
			fx.Fire("zero", 3)
			select {
			case code := <-done:
				if code != 0 {
					t.Fatalf("exit %d: %s", code, errOut.String())
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("3 hits not traced within 20s: %s%s", out.String(), errOut.String())
			}
			hits := 0
			for _, l := range strings.Split(out.String(), "\n") {
				if strings.HasPrefix(l, pid+"/") && strings.Contains(l, " sample:zero @") || strings.HasPrefix(l, `{"kind":"usdt","provider":"sample","name":"zero","pid":`+pid+`,`) {
					hits++
				}
			}
			if hits != 3 {
				t.Fatalf("%d hits of sample:zero from pid %s, want 3:\n%s", hits, pid, out.String())
			}
		})
	}
}
