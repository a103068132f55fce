package usdt_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/probekit/probekit/argspec"
	"github.com/probekit/probekit/internal/features"
	"github.com/probekit/probekit/internal/test/bpftest"
	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/procmaps"
	"github.com/probekit/probekit/usdt"
)

const (
	enoent = -2
	einval = -22
)

// tracer is a loaded args_reader collection (internal/test/bpftest/args.c):
// every hit records bpf_usdt_arg_cnt, and for n in 0..12 the results of
// bpf_usdt_arg and bpf_usdt_arg_size, bpf_usdt_cookie and the IP.
type tracer struct {
	t    testing.TB
	spec *ebpf.CollectionSpec
	coll *ebpf.Collection
	att  *usdt.Attacher
	rd   *ringbuf.Reader
}

func newTracer(t testing.TB, pre17 bool) *tracer {
	t.Helper()
	return newTracerWith(t, pre17, nil)
}

// newTracerWith is newTracer with edit applied to the spec before load.
func newTracerWith(t testing.TB, pre17 bool, edit func(*ebpf.CollectionSpec) error) *tracer {
	t.Helper()
	load := bpftest.LoadArgs
	if pre17 {
		load = bpftest.LoadArgsPre17
	}
	spec, err := load()
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		if err := edit(spec); err != nil {
			t.Fatal(err)
		}
	}
	if err := usdt.Prepare(spec); err != nil {
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
	rd, err := ringbuf.NewReader(coll.Maps["hits"])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rd.Close() })
	return &tracer{t: t, spec: spec, coll: coll, att: att, rd: rd}
}

func (tr *tracer) prog() *ebpf.Program { return tr.coll.Programs["args_reader"] }

func (tr *tracer) attach(path, provider, name string, opts *usdt.Options) *usdt.Link {
	tr.t.Helper()
	l, err := tr.att.Attach(tr.prog(), path, provider, name, opts)
	if err != nil {
		tr.t.Fatal(err)
	}
	tr.t.Cleanup(func() { l.Close() })
	return l
}

// hits reads exactly n hits, then checks that no other arrives.
func (tr *tracer) hits(n int) []bpftest.ArgsHit {
	tr.t.Helper()
	var out []bpftest.ArgsHit
	deadline := time.Now().Add(5 * time.Second)
	for len(out) < n {
		tr.rd.SetDeadline(deadline)
		rec, err := tr.rd.Read()
		if err != nil {
			tr.t.Fatalf("after %d of %d hits: %v", len(out), n, err)
		}
		out = append(out, decodeHit(tr.t, rec.RawSample))
	}
	tr.rd.SetDeadline(time.Now().Add(50 * time.Millisecond))
	if rec, err := tr.rd.Read(); err == nil {
		tr.t.Fatalf("unexpected extra hit: %+v", decodeHit(tr.t, rec.RawSample))
	}
	return out
}

func decodeHit(t testing.TB, raw []byte) bpftest.ArgsHit {
	var h bpftest.ArgsHit
	if err := binary.Read(bytes.NewReader(raw), binary.NativeEndian, &h); err != nil {
		t.Fatal(err)
	}
	return h
}

// checkValues compares what the BPF program read with what the fixture
// passed, and bpf_usdt_arg_cnt/_size/out-of-range results with libbpf's
// conventions.
func checkValues(t *testing.T, probe string, loc *usdt.Location, want testkit.Hit, got bpftest.ArgsHit) {
	t.Helper()
	if int(got.ArgCnt) != len(want.Args) {
		t.Fatalf("%s: bpf_usdt_arg_cnt = %d, want %d", probe, got.ArgCnt, len(want.Args))
	}
	for n := 0; n < len(got.ArgRet); n++ {
		if n < len(want.Args) {
			if got.ArgRet[n] != 0 {
				t.Errorf("%s arg %d (%s): bpf_usdt_arg returned %d", probe, n, loc.Args[n], got.ArgRet[n])
				continue
			}
			if got.ArgVal[n] != want.Args[n] {
				t.Errorf("%s arg %d (%s): read %d, fixture passed %d", probe, n, loc.Args[n], got.ArgVal[n], want.Args[n])
			}
			if int(got.SizeRet[n]) != loc.Args[n].Size {
				t.Errorf("%s arg %d: bpf_usdt_arg_size = %d, want %d", probe, n, got.SizeRet[n], loc.Args[n].Size)
			}
			continue
		}
		if got.ArgRet[n] != enoent || got.SizeRet[n] != enoent || got.ArgVal[n] != 0 {
			t.Errorf("%s arg %d beyond %d: bpf_usdt_arg = %d (value %d), _size = %d; want -ENOENT, 0, -ENOENT",
				probe, n, len(want.Args), got.ArgRet[n], got.ArgVal[n], got.SizeRet[n])
		}
	}
}

// valueProbes are the fixture's probes whose every argument a BPF program
// can read, with one site each.
var valueProbes = []string{"zero", "sizes", "consts", "twelve", "mem", "sib", "global"}

// modes are the attach paths: the kernel's best, and each fallback forced.
var modes = []struct {
	name string
	off  []features.Feature
}{
	{"default", nil},
	{"no-cookie", []features.Feature{features.Cookie}},
	{"no-uprobe-multi", []features.Feature{features.UprobeMulti}},
	{"no-refctr", []features.Feature{features.RefCtr}},
}

func forceOff(t *testing.T, fs []features.Feature) {
	for _, f := range fs {
		t.Cleanup(features.ForceOff(f))
	}
}

func openSample(t *testing.T) *usdt.File {
	t.Helper()
	f, err := usdt.Open(testkit.Fixture("usdt_sample"))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestArgumentValues(t *testing.T) {
	testkit.RequireKernel(t)
	file := openSample(t)
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			forceOff(t, mode.off)
			tr := newTracer(t, false)
			p := testkit.Start(t, testkit.Fixture("usdt_sample"))
			for _, name := range valueProbes {
				probe, err := file.Find("sample", name)
				if err != nil {
					t.Fatal(err)
				}
				l := tr.attach(testkit.Fixture("usdt_sample"), "sample", name,
					&usdt.Options{PID: p.PID(), Cookie: 0xc0ffee00 + uint64(len(name))})
				if w := l.Warnings(); len(w) > 0 {
					t.Errorf("%s: warnings %v", name, w)
				}
				want := p.Fire(name, 3)
				got := tr.hits(len(want))
				for i := range want {
					checkValues(t, name, &probe.Locations[0], want[i], got[i])
					if got[i].Cookie != 0xc0ffee00+uint64(len(name)) {
						t.Errorf("%s: bpf_usdt_cookie = %#x", name, got[i].Cookie)
					}
					if int(got[i].Pid) != p.PID() {
						t.Errorf("%s: hit from pid %d, want %d", name, got[i].Pid, p.PID())
					}
				}
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
			}
			if n := tr.att.SpecsInUse(); n != 0 {
				t.Errorf("%d spec ids still in use after every Close", n)
			}
		})
	}
}

// The pre-1.7 layout reads everything but SIB, which it cannot express:
// that argument alone reports -EINVAL.
func TestPre17Layout(t *testing.T) {
	testkit.RequireKernel(t)
	file := openSample(t)
	tr := newTracer(t, true)
	p := testkit.Start(t, testkit.Fixture("usdt_sample"))
	for _, name := range valueProbes {
		probe, _ := file.Find("sample", name)
		l := tr.attach(testkit.Fixture("usdt_sample"), "sample", name, &usdt.Options{PID: p.PID()})
		want := p.Fire(name, 2)
		got := tr.hits(len(want))
		for i := range want {
			if name != "sib" {
				checkValues(t, name, &probe.Locations[0], want[i], got[i])
				continue
			}
			if len(l.Warnings()) != 1 {
				t.Errorf("sib on the pre-1.7 layout: warnings %v, want one for the SIB argument", l.Warnings())
			}
			if got[i].ArgRet[0] != einval || got[i].ArgRet[1] != 0 || got[i].ArgVal[1] != want[i].Args[1] {
				t.Errorf("sib on the pre-1.7 layout: ret %v val %v; want -EINVAL for arg 0 and arg 1 = %d",
					got[i].ArgRet[:2], got[i].ArgVal[:2], want[i].Args[1])
			}
		}
		l.Close()
	}
}

// sampleAddresses gives the runtime address of each location of probe in
// process pid.
func runtimeAddresses(t *testing.T, pid int, path string, probe *usdt.Probe) map[uint64]int {
	t.Helper()
	proc, objs, err := procmaps.Objects(pid)
	if err != nil {
		t.Fatal(err)
	}
	_ = proc
	id, err := procmaps.IDOf(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range objs {
		if objs[i].ID() != id {
			continue
		}
		out := map[uint64]int{}
		for li, loc := range probe.Locations {
			a, err := objs[i].Address(loc.FileOffset, procmaps.Exec)
			if err != nil {
				t.Fatal(err)
			}
			out[a] = li
		}
		return out
	}
	t.Fatalf("pid %d does not map %s", pid, path)
	return nil
}

func TestThreeSites(t *testing.T) {
	testkit.RequireKernel(t)
	file := openSample(t)
	probe, err := file.Find("sample", "inlined")
	if err != nil {
		t.Fatal(err)
	}
	if len(probe.Locations) != 3 {
		t.Fatalf("sample:inlined has %d locations, want 3", len(probe.Locations))
	}
	for _, mode := range modes[:3] {
		t.Run(mode.name, func(t *testing.T) {
			forceOff(t, mode.off)
			tr := newTracer(t, false)
			p := testkit.Start(t, testkit.Fixture("usdt_sample"))
			tr.attach(testkit.Fixture("usdt_sample"), "sample", "inlined", &usdt.Options{
				PID:            p.PID(),
				LocationCookie: func(_ *usdt.Probe, i int) uint64 { return uint64(100 + i) },
			})
			addrs := runtimeAddresses(t, p.PID(), testkit.Fixture("usdt_sample"), probe)
			const rounds = 4
			want := p.Fire("inlined", rounds)
			got := tr.hits(len(want))
			seen := map[int]int{}
			for i := range got {
				li, ok := addrs[got[i].Ip]
				if !ok {
					t.Fatalf("hit at IP %#x, not a location of sample:inlined (%v)", got[i].Ip, addrs)
				}
				if got[i].Cookie != uint64(100+li) {
					t.Errorf("hit at location %d has cookie %d, want %d", li, got[i].Cookie, 100+li)
				}
				// The fixture's first argument is its call site, 1..3.
				if got[i].ArgVal[0] != want[i].Args[0] || got[i].ArgVal[1] != want[i].Args[1] {
					t.Errorf("hit %d: args %v, want %v", i, got[i].ArgVal[:2], want[i].Args)
				}
				seen[li]++
			}
			for li := 0; li < 3; li++ {
				if seen[li] != rounds {
					t.Errorf("location %d fired %d times, want %d", li, seen[li], rounds)
				}
			}
		})
	}
}

// A path-wide attach (no PID) sees every process running the file.
func TestPathWide(t *testing.T) {
	testkit.RequireKernel(t)
	needPathWidePIE(t)
	tr := newTracer(t, false)
	tr.attach(testkit.Fixture("usdt_sample"), "sample", "consts", nil)
	a := testkit.Start(t, testkit.Fixture("usdt_sample"))
	b := testkit.Start(t, testkit.Fixture("usdt_sample"))
	a.Fire("consts", 1)
	b.Fire("consts", 1)
	got := tr.hits(2)
	pids := map[uint32]bool{got[0].Pid: true, got[1].Pid: true}
	if !pids[uint32(a.PID())] || !pids[uint32(b.PID())] {
		t.Fatalf("hits from %v, want pids %d and %d", pids, a.PID(), b.PID())
	}
}

// needPathWidePIE skips t before Linux 5.15: without BPF cookies a
// position-independent file's sites are keyed by runtime address, which
// needs a PID, so a path-wide attach there is refused (ErrNotSupported;
// TestPathWideRefusedWithoutCookie).
func needPathWidePIE(t *testing.T) {
	t.Helper()
	ok, err := features.Have(features.Cookie)
	testkit.NeedFeature(t, ok, err, features.Cookie.Since(), "path-wide USDT in a position-independent file needs "+features.Cookie.String())
}

// TestPathWideRefusedWithoutCookie: without BPF cookies (before Linux
// 5.15; forced off on newer kernels) a path-wide attach to a
// position-independent file is refused before anything is attached,
// naming the feature and its release; with a PID it attaches and fires.
func TestPathWideRefusedWithoutCookie(t *testing.T) {
	testkit.RequireKernel(t)
	forceOff(t, []features.Feature{features.Cookie})
	tr := newTracer(t, false)
	_, err := tr.att.Attach(tr.prog(), testkit.Fixture("usdt_sample"), "sample", "consts", nil)
	if !errors.Is(err, ebpf.ErrNotSupported) || !strings.Contains(err.Error(), "5.15") {
		t.Fatalf("path-wide: %v; want ErrNotSupported naming Linux 5.15", err)
	}
	if n := tr.att.SpecsInUse(); n != 0 {
		t.Errorf("%d spec ids held after the refusal", n)
	}
	p := testkit.Start(t, testkit.Fixture("usdt_sample"))
	tr.attach(testkit.Fixture("usdt_sample"), "sample", "consts", &usdt.Options{PID: p.PID()})
	p.Fire("consts", 1)
	if got := tr.hits(1); got[0].Pid != uint32(p.PID()) {
		t.Errorf("hit from pid %d, want %d", got[0].Pid, p.PID())
	}
}

// TestIPCollision: without BPF cookies two links of one site in one
// process share its IP entry with the same spec (the same cookie), and
// one with another cookie is refused with ErrIPCollision, leaving the
// first working.
func TestIPCollision(t *testing.T) {
	testkit.RequireKernel(t)
	forceOff(t, []features.Feature{features.Cookie})
	tr := newTracer(t, false)
	p := testkit.Start(t, testkit.Fixture("usdt_sample"))
	fx := testkit.Fixture("usdt_sample")
	a := tr.attach(fx, "sample", "consts", &usdt.Options{PID: p.PID(), Cookie: 1})
	b := tr.attach(fx, "sample", "consts", &usdt.Options{PID: p.PID(), Cookie: 1})
	if _, err := tr.att.Attach(tr.prog(), fx, "sample", "consts", &usdt.Options{PID: p.PID(), Cookie: 2}); !errors.Is(err, usdt.ErrIPCollision) {
		t.Fatalf("another cookie at the same site: %v, want ErrIPCollision", err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	p.Fire("consts", 1)
	if got := tr.hits(1); got[0].Cookie != 1 {
		t.Errorf("hit with cookie %d after the shared link closed, want 1", got[0].Cookie)
	}
	a.Close()
}

// A PID filter excludes a sibling process of the same binary.
func TestPIDFilter(t *testing.T) {
	testkit.RequireKernel(t)
	for _, mode := range modes[:3] {
		t.Run(mode.name, func(t *testing.T) {
			forceOff(t, mode.off)
			tr := newTracer(t, false)
			target := testkit.Start(t, testkit.Fixture("usdt_sample"))
			sibling := testkit.Start(t, testkit.Fixture("usdt_sample"))
			tr.attach(testkit.Fixture("usdt_sample"), "sample", "sizes", &usdt.Options{PID: target.PID()})
			sibling.Fire("sizes", 5)
			target.Fire("sizes", 2)
			sibling.Fire("sizes", 5)
			for _, h := range tr.hits(2) {
				if int(h.Pid) != target.PID() {
					t.Fatalf("hit from pid %d, attached to %d", h.Pid, target.PID())
				}
			}
		})
	}
}

// With a PID and no path, both the executable and the shared library it
// loaded are attached; their probes have the same provider:name.
func TestExecutableAndLibrary(t *testing.T) {
	testkit.RequireKernel(t)
	for _, mode := range modes[:3] {
		t.Run(mode.name, func(t *testing.T) {
			forceOff(t, mode.off)
			tr := newTracer(t, false)
			p := testkit.Start(t, testkit.Fixture("usdt_lib_user"))
			l := tr.attach("", "sample", "shared", &usdt.Options{PID: p.PID()})
			if n := len(l.Sites()); n != 2 {
				t.Fatalf("attached %d sites, want 2 (executable and library)", n)
			}
			want := p.Fire("shared", 2)
			got := tr.hits(len(want))
			origins := map[int64]int{}
			for i := range want {
				if got[i].ArgVal[0] != want[i].Args[0] || got[i].ArgVal[1] != want[i].Args[1] {
					t.Errorf("hit %d: %v, want %v", i, got[i].ArgVal[:2], want[i].Args)
				}
				origins[got[i].ArgVal[0]]++
			}
			if origins[1] != 2 || origins[2] != 2 {
				t.Errorf("hits per object (1 = executable, 2 = library): %v", origins)
			}
		})
	}
}

// semaphoreAddress is the runtime address of sample:sema's counter in pid.
func semaphoreAddress(t *testing.T, pid int) uint64 {
	t.Helper()
	file := openSample(t)
	probe, err := file.Find("sample", "sema")
	if err != nil {
		t.Fatal(err)
	}
	loc := probe.Locations[0]
	_, objs, err := procmaps.Objects(pid)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := procmaps.IDOf(testkit.Fixture("usdt_sample"))
	for i := range objs {
		if objs[i].ID() == id {
			a, err := objs[i].Address(loc.SemaphoreOffset, procmaps.Write)
			if err != nil {
				t.Fatal(err)
			}
			return a
		}
	}
	t.Fatal("fixture not mapped")
	return 0
}

func readSemaphore(t *testing.T, pid int, addr uint64) uint16 {
	t.Helper()
	v, err := testkit.ReadUint16(pid, addr)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestSemaphore(t *testing.T) {
	testkit.RequireKernel(t)
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			forceOff(t, mode.off)
			tr := newTracer(t, false)
			p := testkit.Start(t, testkit.Fixture("usdt_sample"))
			addr := semaphoreAddress(t, p.PID())
			if v := readSemaphore(t, p.PID(), addr); v != 0 {
				t.Fatalf("semaphore %d before attach", v)
			}
			if h := p.Fire("sema", 1); !h[0].Skipped {
				t.Fatal("probe enabled before attach")
			}
			opts := &usdt.Options{PID: p.PID()}
			l1 := tr.attach(testkit.Fixture("usdt_sample"), "sample", "sema", opts)
			if v := readSemaphore(t, p.PID(), addr); v != 1 {
				t.Fatalf("semaphore %d after attach, want 1", v)
			}
			want := p.Fire("sema", 2)
			if want[0].Skipped {
				t.Fatal("probe still gated off after attach")
			}
			got := tr.hits(2)
			for i := range want {
				if got[i].ArgVal[0] != want[i].Args[0] || got[i].ArgVal[1] != want[i].Args[1] {
					t.Errorf("hit %d: %v, want %v", i, got[i].ArgVal[:2], want[i].Args)
				}
			}
			// The kernel counts installed breakpoints, one per (inode,
			// offset) and process however many links share it; the
			// user-space fallback counts activations.
			userSpace := len(mode.off) == 1 && mode.off[0] == features.RefCtr
			two, one := uint16(1), uint16(1)
			if userSpace {
				two = 2
			}
			l2 := tr.attach(testkit.Fixture("usdt_sample"), "sample", "sema", opts)
			if v := readSemaphore(t, p.PID(), addr); v != two {
				t.Fatalf("semaphore %d with two links, want %d", v, two)
			}
			if err := l1.Close(); err != nil {
				t.Fatal(err)
			}
			if v := readSemaphore(t, p.PID(), addr); v != one {
				t.Fatalf("semaphore %d after one Close, want %d", v, one)
			}
			// The second link still fires.
			if h := p.Fire("sema", 1); h[0].Skipped {
				t.Fatal("probe gated off while a link remains")
			}
			tr.hits(1)
			if err := l2.Close(); err != nil {
				t.Fatal(err)
			}
			if v := readSemaphore(t, p.PID(), addr); v != 0 {
				t.Fatalf("semaphore %d after both Close, want 0", v)
			}
			if h := p.Fire("sema", 1); !h[0].Skipped {
				t.Fatal("probe enabled after Close")
			}
		})
	}
}

// Without a PID the kernel must manage the semaphore: refusing is right
// when it cannot.
func TestSemaphoreWithoutRefCtrNeedsPID(t *testing.T) {
	testkit.RequireKernel(t)
	forceOff(t, []features.Feature{features.RefCtr})
	tr := newTracer(t, false)
	_, err := tr.att.Attach(tr.prog(), testkit.Fixture("usdt_sample"), "sample", "sema", nil)
	if !errors.Is(err, ebpf.ErrNotSupported) {
		t.Fatalf("got %v, want ErrNotSupported", err)
	}
}

// tracerHelperEnv makes the test binary a tracer that attaches to the
// semaphore probe of the PID it names, says so, and waits to be killed.
const tracerHelperEnv = "PROBEKIT_TEST_TRACER_PID"

func TestHelperTracer(t *testing.T) {
	pid, err := strconv.Atoi(os.Getenv(tracerHelperEnv))
	if err != nil {
		t.Skip("helper process for TestSemaphoreAfterTracerKilled")
	}
	tr := newTracer(t, false)
	tr.attach(testkit.Fixture("usdt_sample"), "sample", "sema", &usdt.Options{PID: pid})
	fmt.Println("attached")
	time.Sleep(time.Minute)
}

// The kernel's ref_ctr lowers the counter even when the tracer dies
// without closing anything.
func TestSemaphoreAfterTracerKilled(t *testing.T) {
	testkit.RequireKernel(t)
	p := testkit.Start(t, testkit.Fixture("usdt_sample"))
	addr := semaphoreAddress(t, p.PID())
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperTracer$", "-test.v")
	cmd.Env = append(os.Environ(), tracerHelperEnv+"="+strconv.Itoa(p.PID()))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	var seen []byte
	deadline := time.Now().Add(20 * time.Second)
	for !containsLine(seen, "attached") {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("tracer did not attach: %s", seen)
		}
		n, err := out.Read(buf)
		seen = append(seen, buf[:n]...)
		if err != nil {
			break
		}
	}
	if v := readSemaphore(t, p.PID(), addr); v != 1 {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("semaphore %d while the tracer runs, want 1", v)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	// The kernel drops the uprobe when the last fd of its link goes.
	deadline = time.Now().Add(10 * time.Second)
	for readSemaphore(t, p.PID(), addr) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("semaphore %d after the tracer was killed, want 0", readSemaphore(t, p.PID(), addr))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func containsLine(b []byte, line string) bool {
	for _, l := range strings.Split(string(b), "\n") {
		if l == line {
			return true
		}
	}
	return false
}

// A failed attach leaves nothing behind: here the kernel refuses the
// semaphore probe (another uprobe holds its site without a ref_ctr), after
// the other probes of the glob were attached.
func TestFailedAttachRollsBack(t *testing.T) {
	testkit.RequireKernel(t)
	for _, mode := range modes[:3] {
		t.Run(mode.name, func(t *testing.T) {
			forceOff(t, mode.off)
			tr := newTracer(t, false)
			p := testkit.Start(t, testkit.Fixture("usdt_sample"))
			file := openSample(t)
			sema, _ := file.Find("sample", "sema")

			// A plain uprobe on the semaphore site, no ref_ctr_offset,
			// from a program loaded for perf-event links.
			var objs bpftest.CountObjects
			cspec, err := bpftest.LoadCount()
			if err != nil {
				t.Fatal(err)
			}
			cookie, err := features.Have(features.Cookie)
			if err != nil {
				t.Fatal(err)
			}
			if err := cspec.Variables["probekit_usdt_have_cookie"].Set(cookie); err != nil {
				t.Fatal(err)
			}
			if err := cspec.LoadAndAssign(&objs, nil); err != nil {
				t.Fatal(err)
			}
			defer objs.Close()
			ex, err := link.OpenExecutable(testkit.Fixture("usdt_sample"))
			if err != nil {
				t.Fatal(err)
			}
			blocker, err := ex.Uprobe("", objs.CountHits, &link.UprobeOptions{Address: sema.Locations[0].FileOffset, PID: p.PID()})
			if err != nil {
				t.Fatal(err)
			}
			defer blocker.Close()

			addr := semaphoreAddress(t, p.PID())
			fds := countFDs(t)
			_, err = tr.att.Attach(tr.prog(), testkit.Fixture("usdt_sample"), "sample", "*", &usdt.Options{PID: p.PID()})
			if err == nil {
				t.Fatal("attach over a conflicting uprobe succeeded")
			}
			if n := countFDs(t); n != fds {
				t.Errorf("%d fds open after a failed attach, %d before", n, fds)
			}
			if mode.name != "no-cookie" && !errors.Is(err, usdt.ErrRefCtrConflict) {
				t.Errorf("error %v does not wrap ErrRefCtrConflict", err)
			}
			// The message says what happened and how to find the other
			// tracer.
			if mode.name != "no-cookie" && (!strings.Contains(err.Error(), "another tracer") || !strings.Contains(err.Error(), "bpftool")) {
				t.Errorf("error %q does not explain the conflict", err)
			}
			if n := tr.att.SpecsInUse(); n != 0 {
				t.Errorf("%d spec ids in use after a failed attach", n)
			}
			if v := readSemaphore(t, p.PID(), addr); v != 0 {
				t.Errorf("semaphore %d after a failed attach", v)
			}
			blocker.Close()
			// No site that was attached before the failure still fires.
			for _, name := range valueProbes {
				p.Fire(name, 1)
			}
			tr.hits(0)
		})
	}
}

// A site that is not a NOP is refused before anything is attached.
func TestBadSiteRefused(t *testing.T) {
	testkit.RequireKernel(t)
	file := openSample(t)
	probe, _ := file.Find("sample", "inlined")
	data, err := os.ReadFile(testkit.Fixture("usdt_sample"))
	if err != nil {
		t.Fatal(err)
	}
	// The second of three sites becomes a "push %rax": not a NOP.
	data[probe.Locations[1].FileOffset] = 0x50
	bad := t.TempDir() + "/usdt_sample_badsite"
	if err := os.WriteFile(bad, data, 0o755); err != nil {
		t.Fatal(err)
	}
	tr := newTracer(t, false)
	_, err = tr.att.Attach(tr.prog(), bad, "sample", "inlined", nil)
	if !errors.Is(err, usdt.ErrBadSite) {
		t.Fatalf("got %v, want ErrBadSite", err)
	}
	if n := tr.att.SpecsInUse(); n != 0 {
		t.Errorf("%d spec ids in use", n)
	}
}

func TestAttachErrors(t *testing.T) {
	testkit.RequireKernel(t)
	tr := newTracer(t, false)
	for _, c := range []struct {
		path, provider, name string
		opts                 *usdt.Options
		want                 error
	}{
		{testkit.Fixture("usdt_sample"), "sample", "nosuch", nil, usdt.ErrNotFound},
		{testkit.Fixture("usdt_sample"), "nosuch", "*", nil, usdt.ErrNotFound},
		{"/nonexistent/file", "sample", "zero", nil, os.ErrNotExist},
		{"/bin/true", "sample", "zero", nil, usdt.ErrNoProbes},
		{testkit.Fixture("usdt_sample"), "sample", "zero", &usdt.Options{PID: 1 << 22}, os.ErrNotExist},
	} {
		_, err := tr.att.Attach(tr.prog(), c.path, c.provider, c.name, c.opts)
		if !errors.Is(err, c.want) {
			t.Errorf("%s %s:%s: got %v, want %v", c.path, c.provider, c.name, err, c.want)
		}
	}
}

// Attach and detach many times: spec ids, fds and semaphores end where
// they started.
func TestAttachDetachCycles(t *testing.T) {
	testkit.RequireKernel(t)
	cycles := 10000
	if testing.Short() {
		cycles = 200
	}
	cookie := func(i int) uint64 { return uint64(i) }
	if ok, err := features.Have(features.Cookie); err != nil {
		t.Fatal(err)
	} else if !ok {
		// Without BPF cookies a site's spec is keyed by its address:
		// concurrent links of one site share the entry only with the
		// same spec bytes, the same cookie among them (another is an
		// ErrIPCollision, TestIPCollision).
		cookie = func(int) uint64 { return 7 }
	}
	tr := newTracer(t, false)
	p := testkit.Start(t, testkit.Fixture("usdt_sample"))
	addr := semaphoreAddress(t, p.PID())
	fds := countFDs(t)
	start := time.Now()
	// Closing a uprobe link waits for an RCU tasks-trace grace period
	// (tens of ms here), so cycles run in concurrent workers;
	// that also exercises the Attacher's concurrent use.
	const workers = 16 // 16 × 10 specs fit the 256 slots
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	next := make(chan int, cycles)
	for i := 0; i < cycles; i++ {
		next <- i
	}
	close(next)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				l, err := tr.att.Attach(tr.prog(), testkit.Fixture("usdt_sample"), "sample", "*", &usdt.Options{PID: p.PID(), Cookie: cookie(i)})
				if err != nil {
					errs <- fmt.Errorf("cycle %d: %w", i, err)
					return
				}
				if err := l.Close(); err != nil {
					errs <- fmt.Errorf("cycle %d: %w", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("%d attach/detach cycles of %d probes in %v", cycles, len(valueProbes)+3, time.Since(start))
	if n := tr.att.SpecsInUse(); n != 0 {
		t.Errorf("%d spec ids in use", n)
	}
	if got := countFDs(t); got != fds {
		t.Errorf("%d fds open, %d before", got, fds)
	}
	if v := readSemaphore(t, p.PID(), addr); v != 0 {
		t.Errorf("semaphore %d", v)
	}
	// Still working after all of that.
	tr.attach(testkit.Fixture("usdt_sample"), "sample", "consts", &usdt.Options{PID: p.PID()})
	want := p.Fire("consts", 1)
	got := tr.hits(1)
	if got[0].ArgVal[4] != want[0].Args[4] {
		t.Errorf("after cycles: %v, want %v", got[0].ArgVal[:5], want[0].Args)
	}
}

func countFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// The spec map has a fixed number of slots; an attach that needs more
// fails cleanly and a later one succeeds.
func TestSpecsFull(t *testing.T) {
	testkit.RequireKernel(t)
	// Distinct specs at one site, path-wide.
	needPathWidePIE(t)
	tr := newTracer(t, false)
	max := int(tr.coll.Maps["__bpf_usdt_specs"].MaxEntries())
	var links []*usdt.Link
	defer func() {
		// Concurrently: each Close waits for a grace period.
		var wg sync.WaitGroup
		for _, l := range links {
			wg.Add(1)
			go func() { defer wg.Done(); l.Close() }()
		}
		wg.Wait()
	}()
	var err error
	for i := 0; i <= max; i++ {
		var l *usdt.Link
		// Distinct cookies: one spec each.
		l, err = tr.att.Attach(tr.prog(), testkit.Fixture("usdt_sample"), "sample", "zero", &usdt.Options{Cookie: uint64(i)})
		if err != nil {
			break
		}
		links = append(links, l)
	}
	if !errors.Is(err, usdt.ErrSpecsFull) || !errors.Is(err, syscall.E2BIG) {
		t.Fatalf("after %d attaches: %v, want ErrSpecsFull and E2BIG", len(links), err)
	}
	if len(links) != max {
		t.Fatalf("%d attaches fit, want %d", len(links), max)
	}
	links[0].Close()
	l, err := tr.att.Attach(tr.prog(), testkit.Fixture("usdt_sample"), "sample", "zero", nil)
	if err != nil {
		t.Fatalf("after a Close: %v", err)
	}
	links = append(links[1:], l)
}

func TestCloseIdempotent(t *testing.T) {
	testkit.RequireKernel(t)
	tr := newTracer(t, false)
	p := testkit.Start(t, testkit.Fixture("usdt_sample"))
	l := tr.attach(testkit.Fixture("usdt_sample"), "sample", "zero", &usdt.Options{PID: p.PID()})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if n := tr.att.SpecsInUse(); n != 0 {
		t.Fatalf("%d spec ids in use", n)
	}
}

func TestAutoAttachSection(t *testing.T) {
	for _, c := range []struct{ in, file, provider, name string }{
		{"/usr/bin/python3.11:python:function__entry", "/usr/bin/python3.11", "python", "function__entry"},
		{"libc.so.6:libc:setjmp", "libc.so.6", "libc", "setjmp"},
		{"/a:b/c:p:n", "/a:b/c", "p", "n"},
	} {
		f, p, n, err := usdt.ParseSection(c.in)
		if err != nil || f != c.file || p != c.provider || n != c.name {
			t.Errorf("%q: %q %q %q %v", c.in, f, p, n, err)
		}
	}
	for _, bad := range []string{"", "a", "a:b", ":b:c", "a::c", "a:b:"} {
		if _, _, _, err := usdt.ParseSection(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// A program in SEC("usdt/PATH:PROVIDER:NAME") attaches itself.
func TestAutoAttach(t *testing.T) {
	testkit.RequireKernel(t)
	spec, err := bpftest.LoadArgs()
	if err != nil {
		t.Fatal(err)
	}
	fixture := testkit.Fixture("usdt_sample")
	// The section names the fixture as libbpf users write it; the path
	// depends on the checkout, so it is set here.
	spec.Programs["args_reader"].SectionName = "usdt/" + fixture + ":sample:consts"
	delete(spec.Programs, "args_macro") // not auto-attached: plain "usdt"
	if err := usdt.Prepare(spec); err != nil {
		t.Fatal(err)
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		t.Fatal(err)
	}
	defer coll.Close()
	att, err := usdt.NewAttacher(spec, coll)
	if err != nil {
		t.Fatal(err)
	}
	p := testkit.Start(t, fixture)
	links, err := att.AutoAttach(spec, coll, &usdt.Options{PID: p.PID()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, l := range links {
			l.Close()
		}
	}()
	if len(links) != 1 {
		t.Fatalf("%d links, want 1", len(links))
	}
	rd, err := ringbuf.NewReader(coll.Maps["hits"])
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	tr := &tracer{t: t, rd: rd}
	want := p.Fire("consts", 1)
	got := tr.hits(1)
	file := openSample(t)
	probe, _ := file.Find("sample", "consts")
	checkValues(t, "consts", &probe.Locations[0], want[0], got[0])

	// A section naming a probe that does not exist fails, and leaves
	// nothing attached.
	spec2, _ := bpftest.LoadArgs()
	spec2.Programs["args_reader"].SectionName = "usdt/" + fixture + ":sample:nosuch"
	delete(spec2.Programs, "args_macro")
	if err := usdt.Prepare(spec2); err != nil {
		t.Fatal(err)
	}
	coll2, err := ebpf.NewCollection(spec2)
	if err != nil {
		t.Fatal(err)
	}
	defer coll2.Close()
	att2, _ := usdt.NewAttacher(spec2, coll2)
	if _, err := att2.AutoAttach(spec2, coll2, nil); !errors.Is(err, usdt.ErrNotFound) {
		t.Fatalf("got %v, want ErrNotFound", err)
	}
	if n := att2.SpecsInUse(); n != 0 {
		t.Fatalf("%d spec ids in use", n)
	}
}

// A process in its own mount namespace and root (a container): a path is
// resolved as the process sees it, and an empty path finds its executable
// and library through its root. Sites are named by the container's paths.
func TestContainerAttach(t *testing.T) {
	testkit.RequireKernel(t)
	// It attaches to the container's library path-wide (no PID).
	ok, err := features.Have(features.Cookie)
	testkit.NeedFeature(t, ok, err, features.Cookie.Since(), "path-wide USDT in a shared library needs "+features.Cookie.String())
	fx, _ := testkit.StartContainer(t)
	tr := newTracer(t, false)

	l := tr.attach("/app/libusdt_lib.so", "sample", "libonly", &usdt.Options{PID: fx.PID()})
	if s := l.Sites(); len(s) != 1 || s[0].Path != "/app/libusdt_lib.so" {
		t.Fatalf("sites %+v", s)
	}
	want := fx.Fire("libonly", 2)
	got := tr.hits(2)
	for i := range want {
		if got[i].ArgVal[0] != want[i].Args[0] || int(got[i].Pid) != fx.PID() {
			t.Errorf("hit %d: pid %d arg %d, want %d %d", i, got[i].Pid, got[i].ArgVal[0], fx.PID(), want[i].Args[0])
		}
	}
	l.Close()

	// The host's copy of the library is another file: a path-wide attach
	// to it does not reach the container.
	host := tr.attach(testkit.Fixture("libusdt_lib.so"), "sample", "libonly", nil)
	fx.Fire("libonly", 1)
	tr.hits(0)
	host.Close()

	all := tr.attach("", "sample", "shared", &usdt.Options{PID: fx.PID()})
	paths := map[string]bool{}
	for _, s := range all.Sites() {
		paths[s.Path] = true
	}
	if !paths["/app/usdt_lib_user"] || !paths["/app/libusdt_lib.so"] || len(paths) != 2 {
		t.Fatalf("sites in %v, want the container's executable and library", paths)
	}
	want = fx.Fire("shared", 1)
	got = tr.hits(len(want))
	for i := range want {
		if got[i].ArgVal[0] != want[i].Args[0] {
			t.Errorf("hit %d: object %d, want %d", i, got[i].ArgVal[0], want[i].Args[0])
		}
	}
}

// Running out of file descriptors half way through a perf-event attach
// (one fd per site) rolls everything back and says why.
func TestAttachOutOfFDs(t *testing.T) {
	testkit.RequireKernel(t)
	forceOff(t, []features.Feature{features.UprobeMulti})
	tr := newTracer(t, false)
	p := testkit.Start(t, testkit.Fixture("usdt_sample"))
	addr := semaphoreAddress(t, p.PID())
	file := openSample(t)
	if _, err := file.Find("sample", "sema"); err != nil {
		t.Fatal(err)
	}

	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	fds := countFDs(t)
	// Room for the file and a few links, not for the fixture's 12 sites.
	tight := lim
	tight.Cur = uint64(fds + 6)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &tight); err != nil {
		t.Fatal(err)
	}
	_, err := tr.att.Attach(tr.prog(), testkit.Fixture("usdt_sample"), "sample", "*", &usdt.Options{PID: p.PID()})
	if rerr := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); rerr != nil {
		t.Fatal(rerr)
	}
	if err == nil || !strings.Contains(err.Error(), "too many open files") || !strings.Contains(err.Error(), "RLIMIT_NOFILE") {
		t.Fatalf("got %v, want EMFILE with the remedy", err)
	}
	if n := countFDs(t); n != fds {
		t.Errorf("%d fds open after the failed attach, %d before", n, fds)
	}
	if n := tr.att.SpecsInUse(); n != 0 {
		t.Errorf("%d spec ids in use", n)
	}
	if v := readSemaphore(t, p.PID(), addr); v != 0 {
		t.Errorf("semaphore %d", v)
	}
	for _, name := range valueProbes {
		p.Fire(name, 1)
	}
	tr.hits(0)
}

// Targets that die while attached: the survivors keep firing, and closing
// the links of dead ones is clean (L4 of the reliability matrix, scaled to
// a unit test).
func TestTargetsKilled(t *testing.T) {
	testkit.RequireKernel(t)
	tr := newTracer(t, false)
	const n = 12
	var procs []*testkit.Process
	var links []*usdt.Link
	for i := 0; i < n; i++ {
		p := testkit.Start(t, testkit.Fixture("usdt_sample"))
		procs = append(procs, p)
		links = append(links, tr.attach(testkit.Fixture("usdt_sample"), "sample", "sema", &usdt.Options{PID: p.PID()}))
	}
	// Kill every third one.
	for i := 0; i < n; i += 3 {
		procs[i].Kill()
	}
	for i, p := range procs {
		if i%3 == 0 {
			continue
		}
		if h := p.Fire("sema", 1); h[0].Skipped {
			t.Fatalf("target %d: semaphore lowered by others' deaths", i)
		}
	}
	got := tr.hits(n - (n+2)/3)
	seen := map[uint32]bool{}
	for _, h := range got {
		seen[h.Pid] = true
	}
	if len(seen) != n-(n+2)/3 {
		t.Errorf("hits from %d processes, want %d", len(seen), n-(n+2)/3)
	}
	for i, l := range links {
		if err := l.Close(); err != nil {
			t.Errorf("close link of target %d: %v", i, err)
		}
	}
	if k := tr.att.SpecsInUse(); k != 0 {
		t.Errorf("%d spec ids in use", k)
	}
}

// A 32-bit x86 process on the x86-64 kernel: its notes are ELF32, its
// registers sit in the 64-bit pt_regs, and its PC-relative operands are
// GOT-relative (sym@GOTOFF(%ebx)) — libbpf refuses such binaries. Every
// argument reads as passed, except the 8-byte values the compiler keeps in
// register pairs, which the BPF side reports unavailable (-EINVAL).
func TestI386Process(t *testing.T) {
	testkit.RequireKernel(t)
	const fixture = "usdt_sample_i386"
	if _, err := os.Stat("/lib/ld-linux.so.2"); err != nil {
		testkit.Unavailable(t, "running the i386 fixture needs the 32-bit loader (libc6-i386): %v", err)
	}
	testkit.RequireCompatExec(t, testkit.Fixture(fixture))
	file, err := usdt.Open(testkit.Fixture(fixture))
	if err != nil {
		t.Fatal(err)
	}
	tr := newTracer(t, false)
	p := testkit.Start(t, testkit.Fixture(fixture))
	checked := 0
	for _, name := range valueProbes {
		probe, err := file.Find("sample", name)
		if err != nil {
			t.Fatal(err)
		}
		loc := &probe.Locations[0]
		l := tr.attach(testkit.Fixture(fixture), "sample", name, &usdt.Options{PID: p.PID()})
		want := p.Fire(name, 2)
		got := tr.hits(len(want))
		for i := range want {
			if int(got[i].ArgCnt) != len(want[i].Args) {
				t.Fatalf("%s: arg count %d, want %d", name, got[i].ArgCnt, len(want[i].Args))
			}
			for n, w := range want[i].Args {
				a := loc.Args[n]
				switch {
				case a.Kind == argspec.Unsupported:
					if got[i].ArgRet[n] != einval {
						t.Errorf("%s arg %d (%s, unsupported): returned %d, want -EINVAL", name, n, a, got[i].ArgRet[n])
					}
				case got[i].ArgRet[n] != 0 || got[i].ArgVal[n] != w:
					t.Errorf("%s arg %d (%s): read %d (ret %d), fixture passed %d", name, n, a, got[i].ArgVal[n], got[i].ArgRet[n], w)
				default:
					checked++
				}
			}
		}
		l.Close()
	}
	if checked < 40 {
		t.Errorf("only %d argument values compared", checked)
	}
	t.Logf("%d argument values of a 32-bit process read as passed", checked)
}

// SEC("usdt//proc/self/exe:...") with a PID attaches in that process's
// executable (/proc/PID/exe), not inside its root, where /proc/self is
// another process; without a PID it is the calling program's own
// executable, as libbpf reads it: this test binary, which has no probes.
func TestAutoAttachSelfExe(t *testing.T) {
	testkit.RequireKernel(t)
	spec, err := bpftest.LoadArgs()
	if err != nil {
		t.Fatal(err)
	}
	spec.Programs["args_reader"].SectionName = "usdt/" + usdt.SelfExe + ":sample:consts"
	delete(spec.Programs, "args_macro")
	if err := usdt.Prepare(spec); err != nil {
		t.Fatal(err)
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		t.Fatal(err)
	}
	defer coll.Close()
	att, err := usdt.NewAttacher(spec, coll)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := att.AutoAttach(spec, coll, nil); !errors.Is(err, usdt.ErrNoProbes) {
		t.Errorf("without a PID: %v, want ErrNoProbes (this test binary)", err)
	}
	p := testkit.Start(t, testkit.Fixture("usdt_sample"))
	links, err := att.AutoAttach(spec, coll, &usdt.Options{PID: p.PID()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, l := range links {
			l.Close()
		}
	}()
	rd, err := ringbuf.NewReader(coll.Maps["hits"])
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	tr := &tracer{t: t, rd: rd}
	want := p.Fire("consts", 1)
	got := tr.hits(1)
	probe, _ := openSample(t).Find("sample", "consts")
	checkValues(t, "consts", &probe.Locations[0], want[0], got[0])
}
