package bpfunwind

import (
	"testing"

	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/procmaps"
)

// A refused table is held while a process maps it, and let go with the
// last: a host-wide trace that fills the rows must not keep every
// refused table (OpenJDK 17's libjvm.so has 1.4 MiB of .eh_frame) for the rest of its run. Its
// refusal stays in Errors.
func TestRefusedReleased(t *testing.T) {
	testkit.RequireKernel(t)
	tables, err := New(&Options{Rows: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer tables.Close()
	fx := testkit.Fixture("stack_chain_nofp")
	p1, p2 := testkit.Start(t, fx), testkit.Start(t, fx)
	for _, p := range []*testkit.Process{p1, p2} {
		proc, err := procmaps.Open(p.PID())
		if err != nil {
			t.Fatal(err)
		}
		if err := tables.Add(proc); err != nil {
			t.Fatal(err)
		}
	}
	held := func() (n, refs int) {
		tables.mu.Lock()
		defer tables.mu.Unlock()
		for _, e := range tables.errs {
			n++
			refs += e.refs
		}
		return n, refs
	}
	if n, refs := held(); n != 1 || refs != 2 {
		t.Fatalf("%d refused tables held by %d processes, want libc's by 2", n, refs)
	}
	tables.Remove(p1.PID())
	if n, refs := held(); n != 1 || refs != 1 {
		t.Fatalf("after one removal: %d tables, %d holders", n, refs)
	}
	tables.Remove(p2.PID())
	if n, _ := held(); n != 0 {
		t.Errorf("after both: %d refused tables still held", n)
	}
	if len(tables.Errors()) != 1 {
		t.Errorf("errors %v, want libc's refusal", tables.Errors())
	}
}
