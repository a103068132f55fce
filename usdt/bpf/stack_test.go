package bpf_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/procmaps"
	"github.com/probekit/probekit/symbolize"
	"github.com/probekit/probekit/uprobe"
	"github.com/probekit/probekit/usdt"
	"github.com/probekit/probekit/usdt/bpf"
	"github.com/probekit/probekit/usdt/bpf/internal/stacktest"
)

// stackRig is stacktest's programs, loaded, and their ring of stacks.
type stackRig struct {
	spec *ebpf.CollectionSpec
	coll *ebpf.Collection
	rd   *ringbuf.Reader
}

func newStackRig(t testing.TB) *stackRig {
	t.Helper()
	testkit.RequireKernel(t)
	if runtime.GOARCH != "amd64" {
		testkit.Unavailable(t, "stacktest's object runs on amd64 (its arm64 build is a compile test)")
	}
	spec, err := stacktest.LoadStacktest()
	if err != nil {
		t.Fatal(err)
	}
	if err := usdt.Prepare(spec); err != nil {
		t.Fatal(err)
	}
	if err := uprobe.Prepare(spec, "stack_entry", "stack_plain", "stack_copy", "stack_count", "stack_bare", "stack_copy_only"); err != nil {
		t.Fatal(err)
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { coll.Close() })
	rd, err := ringbuf.NewReader(coll.Maps["stacks"])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rd.Close() })
	return &stackRig{spec: spec, coll: coll, rd: rd}
}

// stackEvent is struct stack_event of stacktest.c.
type stackEvent struct {
	pid, tid uint32
	stack    bpf.Stack
}

// records reads want records of at least size bytes within 5s.
func (r *stackRig) records(t testing.TB, want, size int) [][]byte {
	t.Helper()
	var out [][]byte
	deadline := time.Now().Add(5 * time.Second)
	for len(out) < want {
		r.rd.SetDeadline(deadline)
		rec, err := r.rd.Read()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("%d records within 5s, want %d", len(out), want)
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(rec.RawSample) < size {
			t.Fatalf("record of %d bytes, want %d", len(rec.RawSample), size)
		}
		out = append(out, rec.RawSample)
	}
	return out
}

// stacks reads want stack_events.
func (r *stackRig) stacks(t *testing.T, want int) []stackEvent {
	t.Helper()
	var out []stackEvent
	for _, raw := range r.records(t, want, 16+8*bpf.MaxStackDepth) {
		ne := binary.NativeEndian
		s, err := bpf.DecodeStack(raw[16:], int64(ne.Uint64(raw[8:])))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, stackEvent{ne.Uint32(raw), ne.Uint32(raw[4:]), s})
	}
	return out
}

// names symbolizes s in process pid: function names, innermost first,
// and the objects (base names) holding them.
func names(t *testing.T, pid int, s bpf.Stack) (fns, objs []string) {
	t.Helper()
	p, err := symbolize.New(nil).Process(pid)
	if err != nil {
		t.Fatal(err)
	}
	frames, err := p.Symbolize(s.LookupAddresses())
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range frames {
		fns = append(fns, f.Function)
		objs = append(objs, filepath.Base(f.Object))
	}
	return fns, objs
}

// The C chain main -> run -> fire -> chain_a -> chain_b -> chain_c ->
// chain_end, with frame pointers, in a PIE: at the entry of chain_end (a
// leaf without a frame, whose first instruction is not push %rbp: the
// helper adds the caller), at the entry of chain_c (push %rbp: Linux
// 6.11 adds the caller itself on x86-64, the helper must not add it
// twice), and at the USDT site inside chain_c (no caller to add).
func TestStackC(t *testing.T) {
	r := newStackRig(t)
	fx := testkit.Fixture("stack_chain")
	p := testkit.Start(t, fx)
	b, err := uprobe.Open(fx)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	chain := []string{"chain_c", "chain_b", "chain_a", "fire", "run", "main"}
	for _, c := range []struct {
		fn   string
		want []string
	}{
		{"chain_end", append([]string{"chain_end"}, chain...)},
		{"chain_c", chain},
	} {
		l, err := b.Entry(c.fn, r.coll.Programs["stack_entry"], &uprobe.Options{PID: p.PID()})
		if err != nil {
			t.Fatal(err)
		}
		p.Fire("chain", 2)
		l.Close()
		for _, ev := range r.stacks(t, 2) {
			fns, _ := names(t, p.PID(), ev.stack)
			if len(fns) < len(c.want) || !slices.Equal(fns[:len(c.want)], c.want) {
				t.Errorf("stack at the entry of %s: %v, want %v first", c.fn, fns, c.want)
			}
		}
	}

	// Without at_entry, the walk from chain_end's entry skips chain_c.
	l, err := b.Entry("chain_end", r.coll.Programs["stack_plain"], &uprobe.Options{PID: p.PID()})
	if err != nil {
		t.Fatal(err)
	}
	p.Fire("chain", 1)
	l.Close()
	if fns, _ := names(t, p.PID(), r.stacks(t, 1)[0].stack); len(fns) < 2 || fns[0] != "chain_end" || fns[1] != "chain_b" {
		t.Errorf("bpf_get_stack alone at the entry of chain_end: %v, want chain_end, chain_b (chain_c skipped)", fns)
	}

	att, err := usdt.NewAttacher(r.spec, r.coll)
	if err != nil {
		t.Fatal(err)
	}
	l, err = att.Attach(r.coll.Programs["stack_site"], fx, "stack", "leaf", &usdt.Options{PID: p.PID()})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	p.Fire("chain", 1)
	ev := r.stacks(t, 1)[0]
	fns, objs := names(t, p.PID(), ev.stack)
	if len(fns) < len(chain) || !slices.Equal(fns[:len(chain)], chain) || objs[0] != "stack_chain" || ev.pid != uint32(p.PID()) {
		t.Errorf("stack at stack:leaf: %v in %v (pid %d), want %v first", fns, objs, ev.pid, chain)
	}
}

// A shared library's function, at its entry: the library's frame, then
// its caller in the executable. Neither is built with frame pointers
// (-O2), so nothing past the caller is asserted: the caller comes from
// the return address at the stack pointer, not from the chain.
func TestStackSharedLibrary(t *testing.T) {
	r := newStackRig(t)
	p := testkit.Start(t, testkit.Fixture("usdt_lib_user"))
	checkLibStack(t, r, p, "libusdt_lib.so", "usdt_lib_user")
}

// The same in a container: the library is opened, and the stack
// symbolized, through the process's root.
func TestStackContainer(t *testing.T) {
	r := newStackRig(t)
	p, _ := testkit.StartContainer(t)
	checkLibStack(t, r, p, "/app/libusdt_lib.so", "usdt_lib_user")
}

func checkLibStack(t *testing.T, r *stackRig, p *testkit.Process, lib, exe string) {
	t.Helper()
	proc, err := procmaps.Open(p.PID())
	if err != nil {
		t.Fatal(err)
	}
	b, err := uprobe.OpenProcess(proc, lib)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	l, err := b.Entry("usdt_lib_fire_libonly", r.coll.Programs["stack_entry"], nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	p.Fire("libonly", 1)
	ev := r.stacks(t, 1)[0]
	fns, objs := names(t, p.PID(), ev.stack)
	// fire, run and main are static or local: whichever GCC kept.
	if len(fns) < 2 || fns[0] != "usdt_lib_fire_libonly" || objs[0] != "libusdt_lib.so" ||
		objs[1] != exe || !slices.Contains([]string{"fire", "run", "main"}, fns[1]) {
		t.Errorf("stack at usdt_lib_fire_libonly: %v in %v", fns, objs)
	}
}

// Go, with and without a symbol table: main.recurse's entries in
// goroutines, recursing 3 deep. Every stack is main.recurse k times (the
// probed call and its recursive callers, k from 1 to 4), then the
// goroutine's function and runtime.goexit.
func TestStackGo(t *testing.T) {
	r := newStackRig(t)
	for _, name := range []string{"goprog", "goprog_stripped"} {
		t.Run(name, func(t *testing.T) {
			fx := testkit.Fixture(name)
			p := testkit.Start(t, fx)
			b, err := uprobe.Open(fx)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			l, err := b.Entry("main.recurse", r.coll.Programs["stack_entry"], &uprobe.Options{PID: p.PID()})
			if err != nil {
				t.Fatal(err)
			}
			const goroutines, rounds, depth = 4, 3, 3
			p.Do("load 4 3 3")
			l.Close()
			depths := map[int]int{}
			tids := map[uint32]bool{}
			for _, ev := range r.stacks(t, goroutines*rounds*(depth+1)) {
				fns, _ := names(t, p.PID(), ev.stack)
				k := 0
				for k < len(fns) && fns[k] == "main.recurse" {
					k++
				}
				// .symtab names the assembly function runtime.goexit.abi0.
				rest := slices.Clone(fns[k:])
				if len(rest) == 2 {
					rest[1] = strings.TrimSuffix(rest[1], ".abi0")
				}
				if k < 1 || k > depth+1 || !slices.Equal(rest, []string{"main.run.func1", "runtime.goexit"}) {
					t.Fatalf("stack %v", fns)
				}
				depths[k]++
				tids[ev.tid] = true
			}
			for k := 1; k <= depth+1; k++ {
				if depths[k] != goroutines*rounds {
					t.Errorf("%d stacks with %d frames of main.recurse, want %d", depths[k], k, goroutines*rounds)
				}
			}
			if len(tids) < 2 {
				t.Logf("the goroutines ran on %d thread", len(tids))
			}
		})
	}
}

// The header compiles for arm64 too (the link register branch): the
// committed stacktest_arm64_bpfel.o is its build.
func TestStackArm64Object(t *testing.T) {
	obj, err := os.ReadFile("internal/stacktest/stacktest_arm64_bpfel.o")
	if err != nil {
		t.Fatal(err)
	}
	spec, err := ebpf.LoadCollectionSpecFromReader(bytes.NewReader(obj))
	if err != nil {
		t.Fatal(err)
	}
	if spec.Programs["stack_entry"] == nil || !strings.Contains(string(bpf.StackHeader), "regs[30]") {
		t.Fatal("arm64 object without stack_entry")
	}
}

func TestDecodeStack(t *testing.T) {
	raw := binary.NativeEndian.AppendUint64(nil, 0x1000)
	raw = binary.NativeEndian.AppendUint64(raw, 0x2001)
	raw = append(raw, make([]byte, 8)...)
	s, err := bpf.DecodeStack(raw, 2)
	if err != nil || !slices.Equal(s, bpf.Stack{0x1000, 0x2001}) {
		t.Fatalf("%#x, %v", s, err)
	}
	if got := s.LookupAddresses(); !slices.Equal(got, []uint64{0x1000, 0x2000}) {
		t.Errorf("lookup addresses %#x", got)
	}
	for _, n := range []int64{-14, 4, bpf.MaxStackDepth + 1} {
		if _, err := bpf.DecodeStack(raw, n); err == nil {
			t.Errorf("%d frames: no error", n)
		}
	}
}

// StackOf takes a bpf2go struct's frames array as it is.
func TestStackOf(t *testing.T) {
	var ev struct {
		N      int64
		Frames [bpf.MaxStackDepth]uint64
	}
	ev.N, ev.Frames[0], ev.Frames[1], ev.Frames[2] = 2, 0x1000, 0x2001, 0x3001
	s, err := bpf.StackOf(ev.Frames[:], ev.N)
	if err != nil || !slices.Equal(s, bpf.Stack{0x1000, 0x2001}) {
		t.Fatalf("%#x, %v", s, err)
	}
	ev.Frames[0] = 0
	if s[0] != 0x1000 {
		t.Error("the Stack shares the struct's array")
	}
	for _, n := range []int64{-14, bpf.MaxStackDepth + 1} {
		if _, err := bpf.StackOf(ev.Frames[:], n); err == nil {
			t.Errorf("%d frames: no error", n)
		}
	}
	if _, err := bpf.StackOf(ev.Frames[:3], 4); err == nil {
		t.Error("4 frames of 3: no error")
	}
}
