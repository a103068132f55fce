package usdt_test

import (
	"errors"
	"os/exec"
	"sync"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/probekit/probekit/internal/features"
	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/usdt"
)

// TestSpecsSharedAcrossProcesses: the same probe attached, with the same
// cookie, in more processes than the spec map has slots takes the slots
// of one attach; every process's hit reaches the program with its
// arguments; a process that does not map the file takes no slot; and
// every slot is free once the links are closed. Without BPF cookies
// (before Linux 5.15) a position-independent file's sites are found by
// their address in a process that maps it, so a process that does not is
// refused, and one site in one process holds one spec
// (TestIPCollision): the second cookie goes to a process of its own.
func TestSpecsSharedAcrossProcesses(t *testing.T) {
	testkit.RequireKernel(t)
	cookie, err := features.Have(features.Cookie)
	if err != nil {
		t.Fatal(err)
	}
	// A spec map of 16 slots: more processes than slots is then 60, not
	// the default 256's 300 (minutes to start under emulation).
	tr := newTracerWith(t, false, func(spec *ebpf.CollectionSpec) error { return usdt.SetCapacity(spec, 16, 0) })
	max := int(tr.coll.Maps["__bpf_usdt_specs"].MaxEntries())
	if max != 16 {
		t.Fatalf("spec map of %d slots, want 16", max)
	}
	fx := testkit.Fixture("usdt_sample")
	n := max + 44
	procs := make([]*testkit.Process, n+1) // the last one for the second cookie
	for i := range procs {
		procs[i] = testkit.Start(t, fx)
	}
	var links []*usdt.Link
	closeLinks := func() {
		// Concurrently: each Close waits for a grace period.
		var wg sync.WaitGroup
		for _, l := range links {
			wg.Add(1)
			go func() { defer wg.Done(); l.Close() }()
		}
		wg.Wait()
		links = nil
	}
	defer closeLinks()
	perAttach := 0
	for i, p := range procs[:n] {
		l, err := tr.att.Attach(tr.prog(), fx, "sample", "sizes", &usdt.Options{PID: p.PID(), Cookie: 7})
		if err != nil {
			t.Fatalf("attach in process %d of %d (pid %d): %v", i+1, n, p.PID(), err)
		}
		links = append(links, l)
		if i == 0 {
			perAttach = tr.att.SpecsInUse()
		}
	}
	if got := tr.att.SpecsInUse(); got != perAttach || perAttach == 0 {
		t.Fatalf("%d attaches hold %d spec slots, one attach %d", n, got, perAttach)
	}
	// A process that does not map the file: attached by path to its PID,
	// it shares the slots too.
	other := exec.Command("sleep", "60")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		other.Process.Kill()
		other.Wait()
	}()
	l, err := tr.att.Attach(tr.prog(), fx, "sample", "sizes", &usdt.Options{PID: other.Process.Pid, Cookie: 7})
	switch {
	case !cookie && !errors.Is(err, ebpf.ErrNotSupported):
		t.Fatalf("attach without cookies in pid %d, which does not map %s: %v, want ErrNotSupported", other.Process.Pid, fx, err)
	case cookie && err != nil:
		t.Fatalf("attach in pid %d, which does not map %s: %v", other.Process.Pid, fx, err)
	case err == nil:
		links = append(links, l)
	}
	if got := tr.att.SpecsInUse(); got != perAttach {
		t.Fatalf("a process mapping nothing wanted took %d slots", got-perAttach)
	}
	// The first, a middle and the last process: their hits carry their
	// own argument values and the cookie.
	for _, p := range []*testkit.Process{procs[0], procs[n/2], procs[n-1]} {
		want := p.Fire("sizes", 1)
		got := tr.hits(len(want))
		for i := range want {
			if got[i].Cookie != 7 || got[i].ArgVal[0] != want[i].Args[0] {
				t.Errorf("pid %d: cookie %d, arg 1 %d; want 7, %d", p.PID(), got[i].Cookie, got[i].ArgVal[0], want[i].Args[0])
			}
		}
	}
	// Another cookie is another spec.
	l, err = tr.att.Attach(tr.prog(), fx, "sample", "sizes", &usdt.Options{PID: procs[n].PID(), Cookie: 8})
	if err != nil {
		t.Fatal(err)
	}
	links = append(links, l)
	if got := tr.att.SpecsInUse(); got != 2*perAttach {
		t.Fatalf("with a second cookie: %d slots, want %d", got, 2*perAttach)
	}
	closeLinks()
	if got := tr.att.SpecsInUse(); got != 0 {
		t.Fatalf("%d spec slots held after every Close", got)
	}
}
