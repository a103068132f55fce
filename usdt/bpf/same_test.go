package bpf_test

import (
	"errors"
	"fmt"
	"runtime"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/usdt"
	"github.com/probekit/probekit/usdt/bpf/internal/regtest"
)

// sameRig is regtest's same_args program in a collection of its own,
// built for the sites of probes (usdt.SetSameArgs), and its Attacher.
type sameRig struct {
	coll *ebpf.Collection
	att  *usdt.Attacher
	mask uint32 // what SetSameArgs set
	spec *ebpf.CollectionSpec
	read int // hits already returned by hits
}

func newSameRig(t *testing.T, fx string, pid int, probes ...string) *sameRig {
	t.Helper()
	spec, err := regtest.LoadRegtest()
	if err != nil {
		t.Fatal(err)
	}
	delete(spec.Programs, "reg_slots")
	if err := usdt.Prepare(spec); err != nil {
		t.Fatal(err)
	}
	var refs []usdt.ProbeRef
	for _, p := range probes {
		refs = append(refs, usdt.ProbeRef{Target: fx, Provider: "sample", Name: p})
	}
	mask, _, err := usdt.SetSameArgs(spec, refs, &usdt.Options{PID: pid})
	if err != nil {
		t.Fatal(err)
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { coll.Close() })
	att, err := usdt.NewAttacher(spec, coll)
	if err != nil {
		t.Fatal(err)
	}
	return &sameRig{coll: coll, att: att, mask: mask, spec: spec}
}

func (r *sameRig) attach(t *testing.T, fx string, pid int, name string) {
	t.Helper()
	l, err := r.att.Attach(r.coll.Programs["same_args"], fx, "sample", name, &usdt.Options{PID: pid})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
}

// hits returns the n hits stored since the last call.
func (r *sameRig) hits(t *testing.T, n int) []regtest.RegtestSameHit {
	t.Helper()
	var total uint32
	if err := r.coll.Variables["same_n"].Get(&total); err != nil {
		t.Fatal(err)
	}
	if int(total) != r.read+n {
		t.Fatalf("%d hits stored, want %d", int(total)-r.read, n)
	}
	var out []regtest.RegtestSameHit
	for ; r.read < int(total); r.read++ {
		var h regtest.RegtestSameHit
		if err := r.coll.Maps["same_hits"].Lookup(uint32(r.read), &h); err != nil {
			t.Fatal(err)
		}
		out = append(out, h)
	}
	return out
}

// check says whether hit h read the arguments want, with exactly the
// arguments in fast read without the spec (at their values too).
func checkSame(t *testing.T, what string, h regtest.RegtestSameHit, fast uint32, want []int64) {
	t.Helper()
	if h.Fast != fast {
		t.Errorf("%s: arguments read without the spec %#x, want %#x", what, h.Fast, fast)
	}
	for n, w := range want {
		if h.SpecErr[n] != 0 || h.SpecVal[n] != w {
			t.Errorf("%s: argument %d from the spec %d (error %d), want %d", what, n, h.SpecVal[n], h.SpecErr[n], w)
		}
		if h.Fast&(1<<n) != 0 && h.FastVal[n] != w {
			t.Errorf("%s: argument %d without the spec %d, want %d", what, n, h.FastVal[n], w)
		}
	}
}

// TestSameArgs: usdt.SetSameArgs compiles into the program where every
// site has each argument, and __probekit_usdt_same_arg reads what
// bpf_usdt_arg reads from the spec. A probe alone has every register
// argument (sample:sizes: eight sizes and signs) and every constant
// (sample:consts) read without the spec. sample:loop (%rdi %rax %rdx
// %edi) with sample:sema (%rdi %rdx) leaves only the first, which both
// have in %rdi: at hits of either, the others come from the spec. An
// Attacher of a program built for sample:loop alone refuses
// sample:inlined (%rax %rdi).
func TestSameArgs(t *testing.T) {
	testkit.RequireKernel(t)
	if runtime.GOARCH != "amd64" {
		testkit.Unavailable(t, "regtest's object runs on amd64 (its arm64 build is a compile test)")
	}
	fx := testkit.Fixture("usdt_sample")
	p := testkit.Start(t, fx)

	r := newSameRig(t, fx, p.PID(), "sizes")
	if r.mask != 0xff {
		t.Errorf("sample:sizes: arguments %#x read without the spec, want 0xff", r.mask)
	}
	// What SameArgsOf reads back: eight registers, of the fixture's
	// sizes and signs.
	places, err := usdt.SameArgsOf(r.spec)
	if err != nil {
		t.Fatal(err)
	}
	for n, size := range []int{1, 1, 2, 2, 4, 4, 8, 8} {
		if pl, ok := places[n]; !ok || pl.Const || pl.Size != size || pl.Signed != (n%2 == 0) || pl.RegOff%8 != 0 {
			t.Errorf("sample:sizes argument %d: %+v (%v), want a register of %d bytes, signed %v", n, pl, ok, size, n%2 == 0)
		}
	}
	r.attach(t, fx, p.PID(), "sizes")
	want := p.Fire("sizes", 2)
	for i, h := range r.hits(t, 2) {
		checkSame(t, fmt.Sprintf("sizes round %d", i), h, 0xff, want[i].Args)
	}

	r = newSameRig(t, fx, p.PID(), "consts")
	r.attach(t, fx, p.PID(), "consts")
	want = p.Fire("consts", 1)
	checkSame(t, "consts", r.hits(t, 1)[0], 0x1f, want[0].Args)
	if places, err = usdt.SameArgsOf(r.spec); err != nil || len(places) != 5 {
		t.Fatalf("sample:consts: %v, %v", places, err)
	}
	for n, v := range want[0].Args {
		if pl := places[n]; !pl.Const || pl.Value != v {
			t.Errorf("sample:consts argument %d: %+v, want the constant %d", n, pl, v)
		}
	}

	r = newSameRig(t, fx, p.PID(), "loop", "sema")
	r.attach(t, fx, p.PID(), "loop")
	r.attach(t, fx, p.PID(), "sema")
	p.Fire("loop", 2)
	for i, h := range r.hits(t, 2) {
		checkSame(t, fmt.Sprintf("loop round %d", i), h, 0x1, []int64{int64(i), int64(i) + 1, -int64(i), int64(i)})
	}
	want = p.Fire("sema", 1)
	if len(want) != 1 || want[0].Skipped {
		t.Fatalf("sample:sema reported %+v, want one hit", want)
	}
	checkSame(t, "sema", r.hits(t, 1)[0], 0x1, want[0].Args)

	r = newSameRig(t, fx, p.PID(), "loop")
	if l, err := r.att.Attach(r.coll.Programs["same_args"], fx, "sample", "inlined", &usdt.Options{PID: p.PID()}); !errors.Is(err, usdt.ErrNotSameArgs) {
		if l != nil {
			l.Close()
		}
		t.Errorf("sample:inlined on a program built for sample:loop: %v, want ErrNotSameArgs", err)
	}
	r.attach(t, fx, p.PID(), "loop")
	p.Fire("loop", 1)
	checkSame(t, "loop alone", r.hits(t, 1)[0], 0xf, []int64{0, 1, 0, 0})
}
