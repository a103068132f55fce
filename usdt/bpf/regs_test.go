package bpf_test

import (
	"runtime"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/uprobe"
	"github.com/probekit/probekit/usdt/bpf/internal/regtest"
)

// Every slot of the uprobe context read through usdt.bpf.h's switch of
// constant-offset loads equals the same slot read with
// bpf_probe_read_kernel, at the entry of usdt_sample's fire_loop(r),
// whose first argument (rdi) is the round: 2 at the last of three.
func TestRegisterSlots(t *testing.T) {
	testkit.RequireKernel(t)
	if runtime.GOARCH != "amd64" {
		testkit.Unavailable(t, "regtest's object runs on amd64 (its arm64 build is a compile test)")
	}
	spec, err := regtest.LoadRegtest()
	if err != nil {
		t.Fatal(err)
	}
	if err := uprobe.Prepare(spec, "reg_slots"); err != nil {
		t.Fatal(err)
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		t.Fatal(err)
	}
	defer coll.Close()

	fx := testkit.Fixture("usdt_sample")
	p := testkit.Start(t, fx)
	b, err := uprobe.Open(fx)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	l, err := b.Entry("fire_loop", coll.Programs["reg_slots"], &uprobe.Options{PID: p.PID()})
	if err != nil {
		t.Fatal(err)
	}
	p.Fire("loop", 3)
	l.Close()

	var s regtest.RegtestRegSlots
	if err := coll.Maps["slots"].Lookup(uint32(0), &s); err != nil {
		t.Fatal(err)
	}
	const rdi, rip = 112 / 8, 128 / 8 // slots of the uapi x86-64 pt_regs
	if s.Hits != 3 || s.Nslots != 21 {
		t.Fatalf("%d hits, %d slots; want 3 hits of 21 slots", s.Hits, s.Nslots)
	}
	for i := range s.Nslots {
		if s.FastErr[i] != 0 || s.HelperErr[i] != 0 || s.Fast[i] != s.Helper[i] {
			t.Errorf("slot %d (offset %d): switch %#x (error %d), bpf_probe_read_kernel %#x (error %d)",
				i, 8*i, s.Fast[i], s.FastErr[i], s.Helper[i], s.HelperErr[i])
		}
	}
	if s.Fast[rdi] != 2 {
		t.Errorf("rdi at the last fire_loop entry: %d, want 2", s.Fast[rdi])
	}
	if s.Fast[rip] == 0 {
		t.Error("rip is 0")
	}
}
