package uprobe

import (
	"errors"
	"os/exec"
	"runtime"
	"strconv"
	"testing"

	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/procmaps"
)

// TestEntriesSkipRefused: a glob over functions one of which the kernel
// refuses to probe (a lock-prefixed first instruction on x86-64) attaches
// the others as one attachment with Options.Skip, which is told the
// refused one with ErrKernelRefused; they fire, it does not. Without Skip
// the whole attachment fails, as before.
func TestEntriesSkipRefused(t *testing.T) {
	testkit.RequireKernel(t)
	if runtime.GOARCH != "amd64" {
		t.Skip("the fixture's refused instruction is x86-64's")
	}
	fx := testkit.Fixture("lock_entry")
	for _, mode := range modes(t) {
		t.Run(string(mode), func(t *testing.T) {
			useMode(t, mode)
			// The kernel reads a site's instruction when it plants the
			// breakpoint in a mapping: the process is there, stopped
			// after exec, when the probes attach.
			const n = 25
			cmd := exec.Command(fx, strconv.Itoa(n))
			launched, err := procmaps.Launch(cmd)
			if err != nil {
				t.Fatal(err)
			}
			defer launched.Finish(errors.New("test over"))
			b := mustOpen(t, fx)
			fns, err := b.Resolve("probe_*")
			if err != nil || len(fns) != 3 {
				t.Fatalf("Resolve(probe_*) = %v, %v; want 3 functions", fns, err)
			}
			prog, m := recorder(t, regRDI, regRDI)
			cookies := map[string]uint64{"probe_locked": 1, "probe_plain_a": 2, "probe_plain_b": 3}
			cookie := func(fn Function) uint64 { return cookies[fn.Name] }
			if l, err := b.Entries(fns, prog, &Options{FunctionCookie: cookie}); err == nil {
				l.Close()
				t.Fatal("Entries without Skip attached a site the kernel refuses")
			}
			var skipped []string
			l, err := b.Entries(fns, prog, &Options{FunctionCookie: cookie, Skip: func(fn Function, err error) {
				if !errors.Is(err, ErrKernelRefused) {
					t.Errorf("%s skipped with %v, want ErrKernelRefused", fn, err)
				}
				skipped = append(skipped, fn.Name)
			}})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			if len(skipped) != 1 || skipped[0] != "probe_locked" {
				t.Errorf("skipped %v, want [probe_locked]", skipped)
			}
			if n := len(l.Sites()); n != 2 {
				t.Errorf("%d sites attached, want 2", n)
			}
			if err := launched.Finish(nil); err != nil {
				t.Fatal(err)
			}
			if err := cmd.Wait(); err != nil {
				t.Fatalf("%s: %v", fx, err)
			}
			for c, want := range map[uint64]uint64{1: 0, 2: n, 3: n} {
				if got := total(hits(t, m, c)); got != want {
					t.Errorf("cookie %d: %d hits, want %d", c, got, want)
				}
			}
		})
	}
}
