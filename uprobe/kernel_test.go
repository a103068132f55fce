package uprobe

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"github.com/probekit/probekit/attach"
	"github.com/probekit/probekit/internal/features"
	"github.com/probekit/probekit/internal/test/testkit"
)

// x86-64 struct pt_regs offsets (arch/x86/include/uapi/asm/ptrace.h).
const (
	regRBX = 40
	regRAX = 80
	regRCX = 88
	regRDI = 112
	regRIP = 128
)

// hitKey is the key the recorder program counts under.
type hitKey struct {
	Cookie, A, B uint64
}

// recorder builds a program that counts hits in a hash map under
// {attach cookie, the pt_regs word at offA, the word at offB}, prepared
// (Prepare) for the attach mode in force.
func recorder(tb testing.TB, offA, offB int16) (*ebpf.Program, *ebpf.Map) {
	return recorderPrepared(tb, offA, offB, true)
}

func recorderPrepared(tb testing.TB, offA, offB int16, prepare bool) (*ebpf.Program, *ebpf.Map) {
	tb.Helper()
	// The tests tell their probes apart by cookie; uprobe has no
	// stand-in for it (a non-zero cookie fails with ErrNotSupported).
	ok, err := features.Have(features.Cookie)
	testkit.NeedFeature(tb, ok, err, features.Cookie.Since(), features.Cookie.String())
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: 24, ValueSize: 8, MaxEntries: 1 << 14})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { m.Close() })
	spec := &ebpf.ProgramSpec{
		Name:    "uprobe_rec",
		Type:    ebpf.Kprobe,
		License: "Dual MIT/GPL",
		Instructions: asm.Instructions{
			asm.Mov.Reg(asm.R6, asm.R1),
			asm.FnGetAttachCookie.Call(),
			asm.StoreMem(asm.RFP, -24, asm.R0, asm.DWord),
			asm.LoadMem(asm.R1, asm.R6, offA, asm.DWord),
			asm.StoreMem(asm.RFP, -16, asm.R1, asm.DWord),
			asm.LoadMem(asm.R1, asm.R6, offB, asm.DWord),
			asm.StoreMem(asm.RFP, -8, asm.R1, asm.DWord),
			asm.LoadMapPtr(asm.R1, m.FD()),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, -24),
			asm.FnMapLookupElem.Call(),
			asm.JNE.Imm(asm.R0, 0, "count"),
			// First hit of this key: insert 0 (NOEXIST, so a racing CPU's
			// insert wins and neither count is lost), then look up again.
			asm.Mov.Imm(asm.R1, 0),
			asm.StoreMem(asm.RFP, -32, asm.R1, asm.DWord),
			asm.LoadMapPtr(asm.R1, m.FD()),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, -24),
			asm.Mov.Reg(asm.R3, asm.RFP),
			asm.Add.Imm(asm.R3, -32),
			asm.Mov.Imm(asm.R4, 1), // BPF_NOEXIST
			asm.FnMapUpdateElem.Call(),
			asm.LoadMapPtr(asm.R1, m.FD()),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, -24),
			asm.FnMapLookupElem.Call(),
			asm.JEq.Imm(asm.R0, 0, "out"),
			asm.Mov.Imm(asm.R1, 1).WithSymbol("count"),
			asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
			asm.Mov.Imm(asm.R0, 0).WithSymbol("out"),
			asm.Return(),
		},
	}
	if prepare {
		if err := Prepare(&ebpf.CollectionSpec{Programs: map[string]*ebpf.ProgramSpec{spec.Name: spec}}, spec.Name); err != nil {
			tb.Fatal(err)
		}
	}
	prog, err := ebpf.NewProgram(spec)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { prog.Close() })
	return prog, m
}

// hits reads the map: key -> count, for keys with the given cookie.
func hits(tb testing.TB, m *ebpf.Map, cookie uint64) map[[2]uint64]uint64 {
	tb.Helper()
	out := make(map[[2]uint64]uint64)
	var k hitKey
	var v uint64
	it := m.Iterate()
	for it.Next(&k, &v) {
		if k.Cookie == cookie {
			out[[2]uint64{k.A, k.B}] = v
		}
	}
	if err := it.Err(); err != nil {
		tb.Fatal(err)
	}
	return out
}

func total(h map[[2]uint64]uint64) (n uint64) {
	for _, v := range h {
		n += v
	}
	return n
}

// startFixture runs a fixture driven over stdin (testkit's protocol:
// "ready PID", then commands answered by "done") and fails the test if it
// does not exit cleanly at the end: a crash under a probe.
func startFixture(tb testing.TB, path string) *testkit.Process {
	tb.Helper()
	fx := testkit.Start(tb, path)
	tb.Cleanup(func() {
		if err := fx.Exit(); err != nil {
			tb.Errorf("%s exited: %v", path, err)
		}
	})
	return fx
}

// attachMode is how a test attaches: one perf-event uprobe per site
// (uprobe_multi forced off), or one uprobe_multi link.
type attachMode string

const (
	perfEvent   attachMode = "perf-event"
	uprobeMulti attachMode = "uprobe_multi"
)

func modes(tb testing.TB) []attachMode {
	if ok, _ := features.Have(features.UprobeMulti); ok {
		return []attachMode{perfEvent, uprobeMulti}
	}
	if testkit.KernelRequired() {
		tb.Log("uprobe_multi unavailable: testing the perf-event mode only")
	}
	return []attachMode{perfEvent}
}

// useMode makes the rest of the test attach in mode; programs must be
// prepared after it.
func useMode(tb testing.TB, mode attachMode) {
	if mode == perfEvent {
		tb.Cleanup(features.ForceOff(features.UprobeMulti))
	}
}

func mustAttach(tb testing.TB, l link.Link, err error) link.Link {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { l.Close() })
	return l
}

func TestGoEntryReturn(t *testing.T) {
	testkit.RequireKernel(t)
	for _, path := range []string{goprog, goprogStripped} {
		for _, mode := range modes(t) {
			t.Run(fmt.Sprintf("%s/%s", path[len("../testdata/bin/"):], mode), func(t *testing.T) {
				testGoEntryReturn(t, path, mode)
			})
		}
	}
}

func testGoEntryReturn(t *testing.T, path string, mode attachMode) {
	useMode(t, mode)
	b := mustOpen(t, path)
	fx := startFixture(t, path)
	// Two recorders: arguments/results in (RAX, RBX), and the result with
	// the probed instruction's address (RAX, RIP).
	argProg, argMap := recorder(t, regRAX, regRBX)
	ripProg, ripMap := recorder(t, regRAX, regRIP)
	opts := func(cookie uint64) *Options { return &Options{PID: fx.PID(), Cookie: cookie} }

	l, err := b.Entry("main.add", argProg, opts(1))
	mustAttach(t, l, err)
	// The mode in force decides the kernel link, with nothing carried
	// from Prepare to the attach.
	want := link.PerfEventType
	if mode == uprobeMulti {
		want = link.UprobeMultiType
	}
	if info, err := l.Info(); err != nil || info.Type != want {
		t.Fatalf("entry link: %v, %v; want type %v", info, err, want)
	}
	l, err = b.Return("main.add", argProg, opts(2))
	mustAttach(t, l, err)
	l, err = b.Entry("main.classify", argProg, opts(3))
	mustAttach(t, l, err)
	l, err = b.Return("main.classify", ripProg, opts(4))
	mustAttach(t, l, err)
	l, err = b.Return("main.pair", argProg, opts(5))
	mustAttach(t, l, err)

	const n = 40
	fx.Do("add " + strconv.Itoa(n))
	fx.Do("classify " + strconv.Itoa(n))
	fx.Do("pair 20")

	// add(i, 2i+1): entry sees a=RAX, b=RBX; the return sees the sum in
	// RAX (RBX is whatever the function left there, not checked).
	entries := hits(t, argMap, 1)
	returns := hits(t, argMap, 2)
	for i := uint64(0); i < n; i++ {
		if c := entries[[2]uint64{i, 2*i + 1}]; c != 1 {
			t.Errorf("add(%d, %d) entry seen %d times", i, 2*i+1, c)
		}
	}
	if total(entries) != n || total(returns) != n {
		t.Errorf("add: %d entries, %d returns, want %d each", total(entries), total(returns), n)
	}
	sums := make(map[uint64]uint64)
	for k, c := range returns {
		sums[k[0]] += c
	}
	for i := uint64(0); i < n; i++ {
		if sums[3*i+1] != 1 {
			t.Errorf("add return value %d seen %d times", 3*i+1, sums[3*i+1])
		}
	}

	// classify cycles through -5, 0, 7, 5000: each input and each result
	// (-1, 0, 1, 2) n/4 times, each result from its own RET.
	in := hits(t, argMap, 3)
	inputs := make(map[int64]uint64)
	for k, c := range in {
		inputs[int64(k[0])] += c
	}
	for _, v := range []int64{-5, 0, 7, 5000} {
		if inputs[v] != n/4 {
			t.Errorf("classify(%d) entries %d, want %d", v, inputs[v], n/4)
		}
	}
	fn, err := b.Function("main.classify")
	if err != nil {
		t.Fatal(err)
	}
	scan, err := b.ReturnSites(fn)
	if err != nil {
		t.Fatal(err)
	}
	rets, _ := scan.Returns()
	sites := make(map[uint64]bool)
	for _, r := range rets {
		sites[fn.Address+r] = true // non-PIE: runtime address = link-time address
	}
	out := hits(t, ripMap, 4)
	ripOf := make(map[int64]uint64)
	for k, c := range out {
		v := int64(k[0])
		if !sites[k[1]] {
			t.Errorf("classify returned %d at %#x, not a RET site %v", v, k[1], sites)
		}
		if prev, ok := ripOf[v]; ok && prev != k[1] {
			t.Errorf("result %d from two sites %#x and %#x", v, prev, k[1])
		}
		ripOf[v] = k[1]
		if c != n/4 {
			t.Errorf("classify result %d at %#x seen %d times, want %d", v, k[1], c, n/4)
		}
	}
	if len(out) != 4 || len(sites) != 4 {
		t.Errorf("classify: %d (result, site) pairs over %d sites, want 4 and 4: %v", len(out), len(sites), out)
	}

	// pair(i, 10) returns (min, max) in RAX, RBX.
	p := hits(t, argMap, 5)
	for i := uint64(0); i < 20; i++ {
		want := [2]uint64{min(i, 10), max(i, 10)}
		if p[want] == 0 {
			t.Errorf("pair(%d, 10) result %v not seen: %v", i, want, p)
		}
	}
	if total(p) != 20 {
		t.Errorf("pair: %d returns, want 20", total(p))
	}
}

// TestGoLoad runs goroutines making calls that grow and move their
// stacks while entry and RET-site probes are attached: the process must
// survive and every call must be seen entering and returning once.
func TestGoLoad(t *testing.T) {
	testkit.RequireKernel(t)
	if testing.Short() {
		t.Skip("load test")
	}
	ms := modes(t)
	useMode(t, ms[len(ms)-1])
	for _, path := range []string{goprog, goprogStripped} {
		t.Run(path[len("../testdata/bin/"):], func(t *testing.T) {
			b := mustOpen(t, path)
			fx := startFixture(t, path)
			prog, m := recorder(t, regRAX, regRAX)
			for i, fn := range []string{"main.recurse", "main.add", "main.classify"} {
				o := &Options{PID: fx.PID(), Cookie: uint64(10 + 2*i)}
				l, err := b.Entry(fn, prog, o)
				mustAttach(t, l, err)
				o.Cookie++
				l, err = b.Return(fn, prog, o)
				mustAttach(t, l, err)
			}
			// The same entry at the function's first instruction, which
			// runtime.morestack restarts: the contrast that proves the
			// default placement matters.
			l, err := b.Entry("main.recurse", prog, &Options{PID: fx.PID(), Cookie: 20, FunctionStart: true})
			mustAttach(t, l, err)
			const (
				goroutines = 8
				rounds     = 100
				depth      = 40
				deep       = 3000 // ~3 MiB of stack: several copies
			)
			fx.Do(fmt.Sprintf("load %d %d %d", goroutines, rounds, depth))
			fx.Do(fmt.Sprintf("recurse %d 3", deep))
			recurseCalls := uint64(goroutines*rounds*(depth+1) + 3*(deep+1))
			calls := map[uint64]uint64{10: recurseCalls, 12: goroutines * rounds, 14: goroutines * rounds}
			for cookie, want := range calls {
				in, out := total(hits(t, m, cookie)), total(hits(t, m, cookie+1))
				// Every call enters and returns exactly once, although the
				// stack grows many times: the entry probe sits after the
				// stack check, which runtime.morestack restarts.
				if out != want || in != want {
					t.Errorf("cookie %d: %d entries, %d returns, want %d of each", cookie, in, out, want)
				}
			}
			if atStart := total(hits(t, m, 20)); atStart <= recurseCalls {
				t.Errorf("%d entries at main.recurse's first instruction for %d calls: the stack never grew, the test proves nothing", atStart, recurseCalls)
			} else {
				t.Logf("main.recurse: %d calls, %d hits at its first instruction (restarts after morestack)", recurseCalls, atStart)
			}
		})
	}
}

func TestGoUretprobeRefused(t *testing.T) {
	b := mustOpen(t, goprogStripped)
	// Refused before the program is looked at, so no kernel is needed.
	_, err := b.Uretprobe("main.add", nil, nil)
	if !errors.Is(err, ErrGoUretprobe) || !strings.Contains(err.Error(), "main.add") || !strings.Contains(err.Error(), goprogStripped) {
		t.Fatalf("Uretprobe on Go = %v, want ErrGoUretprobe naming the symbol and file", err)
	}

	testkit.RequireKernel(t)
	prog, _ := recorder(t, regRAX, regRAX)
	if _, err := b.Uretprobe("main.add", prog, &Options{}); !errors.Is(err, ErrGoUretprobe) {
		t.Fatalf("Uretprobe on Go with a program = %v", err)
	}
	// The explicit opt-in attaches (and is detached at once, before the
	// program runs anything).
	l, err := b.Uretprobe("main.add", prog, &Options{AllowUretprobeOnGo: true, PID: os.Getpid()})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

// libcOf returns the path of the libc process pid maps, as its maps show.
func libcOf(tb testing.TB, pid int) string {
	tb.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) >= 6 && strings.Contains(fields[5], "/libc.so") {
			return fields[5]
		}
	}
	tb.Fatalf("pid %d maps no libc", pid)
	return ""
}

func TestMallocFree(t *testing.T) {
	testkit.RequireKernel(t)
	for _, mode := range modes(t) {
		for _, retSites := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/retsites=%v", mode, retSites), func(t *testing.T) {
				testMallocFree(t, mode, retSites)
			})
		}
	}
}

func testMallocFree(t *testing.T, mode attachMode, retSites bool) {
	useMode(t, mode)
	fx := startFixture(t, mallocUser)
	other := startFixture(t, mallocUser) // same sizes, must not be seen
	b, err := OpenProcess(processOf(t, fx.PID()), libcOf(t, fx.PID()))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	prog, m := recorder(t, regRDI, regRCX)
	retProg, retMap := recorder(t, regRAX, regRCX)
	l, err := b.Entry("malloc", prog, &Options{Cookie: 1})
	mustAttach(t, l, err)
	l, err = b.Return("malloc", retProg, &Options{Cookie: 2, ReturnSites: retSites})
	mustAttach(t, l, err)
	l, err = b.Entry("free", prog, &Options{Cookie: 3})
	mustAttach(t, l, err)

	sizes := map[uint64]int{12345: 5, 777777: 3} // the second is mmap-sized
	var ptrs []uint64
	for size, n := range sizes {
		other.Do(fmt.Sprintf("malloc %d %d", size, n))
		for _, line := range fx.Do(fmt.Sprintf("malloc %d %d", size, n)) {
			p, err := strconv.ParseUint(strings.TrimPrefix(line, "ptr 0x"), 16, 64)
			if err != nil {
				t.Fatalf("fixture line %q", line)
			}
			ptrs = append(ptrs, p)
		}
	}
	if len(ptrs) != 8 {
		t.Fatalf("fixture printed %d pointers", len(ptrs))
	}

	mallocs := hits(t, m, 1)
	for size, n := range sizes {
		var seen uint64
		for k, c := range mallocs {
			if k[0] == size {
				seen += c
			}
		}
		if seen != uint64(n) {
			t.Errorf("malloc(%d) seen %d times, want %d (pid filter or probe broken)", size, seen, n)
		}
	}
	returned := make(map[uint64]bool)
	for k := range hits(t, retMap, 2) {
		returned[k[0]] = true
	}
	freed := make(map[uint64]bool)
	for k := range hits(t, m, 3) {
		freed[k[0]] = true
	}
	for _, p := range ptrs {
		if !returned[p] || !freed[p] {
			t.Errorf("block %#x: returned by malloc %v, passed to free %v", p, returned[p], freed[p])
		}
	}
}

// TestAttachErrors checks that a failing attach leaves nothing behind and
// that Close is idempotent.
func TestAttachErrors(t *testing.T) {
	testkit.RequireKernel(t)
	b := mustOpen(t, goprog)
	prog, _ := recorder(t, regRAX, regRAX)

	l, err := b.Return("main.classify", prog, &Options{PID: os.Getpid()})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := l.Pin("/sys/fs/bpf/x"); err == nil {
		t.Error("Pin of a closed link succeeded")
	}

	// A PID that does not exist fails at the first site.
	if _, err := b.Return("main.classify", prog, &Options{PID: 1 << 30}); err == nil {
		t.Error("attach to a missing PID succeeded")
	}

	// A program loaded for perf events cannot go through uprobe_multi:
	// an error, never a silent fallback.
	if ok, _ := features.Have(features.UprobeMulti); ok {
		raw, _ := recorderPrepared(t, regRAX, regRAX, false)
		_, err := b.Entry("main.add", raw, &Options{PID: os.Getpid()})
		if !errors.Is(err, ErrNotPrepared) || !strings.Contains(err.Error(), "Prepare") {
			t.Errorf("unprepared program on a uprobe_multi kernel: %v, want ErrNotPrepared", err)
		}
	}
	if _, err := b.Entry("main.nosuch", prog, nil); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing symbol: %v", err)
	}
	if _, err := b.Return("main.add", prog, &Options{Offset: 1}); err == nil {
		t.Error("Return with Offset accepted")
	}

	// A program of another architecture is read but never attached.
	if runtime.GOARCH == "amd64" {
		arm := mustOpen(t, "../testdata/bin/goprog_arm64")
		if _, err := arm.Entry("main.add", prog, nil); !errors.Is(err, attach.ErrForeignMachine) {
			t.Errorf("entry in an arm64 program: %v, want ErrForeignMachine", err)
		}
	}
	// A closed Binary attaches nothing: its descriptor is gone.
	c, err := Open(goprog)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if _, err := c.Entry("main.add", prog, nil); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("entry through a closed Binary: %v", err)
	}
}

// Entries and Returns put many functions in one attachment: one
// uprobe_multi link for all of them where the kernel has it, each
// function with its own cookie, and every call seen once.
func TestManyFunctionsOneLink(t *testing.T) {
	testkit.RequireKernel(t)
	for _, mode := range modes(t) {
		t.Run(string(mode), func(t *testing.T) {
			useMode(t, mode)
			b := mustOpen(t, goprog)
			fx := startFixture(t, goprog)
			prog, m := recorder(t, regRAX, regRAX)
			var fns []Function
			for _, name := range []string{"main.add", "main.classify"} {
				fn, err := b.Function(name)
				if err != nil {
					t.Fatal(err)
				}
				fns = append(fns, fn)
			}
			cookies := map[string]uint64{"main.add": 1, "main.classify": 2}
			opts := &Options{PID: fx.PID(), FunctionCookie: func(fn Function) uint64 { return cookies[fn.Name] }}
			entries, err := b.Entries(fns, prog, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer entries.Close()
			retOpts := &Options{PID: fx.PID(), FunctionCookie: func(fn Function) uint64 { return 10 + cookies[fn.Name] }}
			returns, err := b.Returns(fns, prog, retOpts)
			if err != nil {
				t.Fatal(err)
			}
			defer returns.Close()
			if mode == uprobeMulti {
				if info, err := entries.Info(); err != nil || info.Type != link.UprobeMultiType {
					t.Errorf("entries: %v, %v; want one uprobe_multi link", info, err)
				}
			} else if n := len(entries.Sites()); n != 2 {
				t.Errorf("entries: %d sites, want 2", n)
			}
			const n = 12
			fx.Do("add " + strconv.Itoa(n))
			fx.Do("classify " + strconv.Itoa(n))
			for cookie, what := range map[uint64]string{1: "add entries", 2: "classify entries", 11: "add returns", 12: "classify returns"} {
				total := uint64(0)
				for _, c := range hits(t, m, cookie) {
					total += c
				}
				if total != n {
					t.Errorf("%s: %d hits, want %d", what, total, n)
				}
			}
		})
	}
}
