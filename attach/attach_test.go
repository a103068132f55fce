package attach_test

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"github.com/probekit/probekit/attach"
	"github.com/probekit/probekit/internal/features"
	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/procmaps"
)

func TestMain(m *testing.M) { os.Exit(testkit.RunWithLeakCheck(m)) }

func TestIsProbeProgram(t *testing.T) {
	for sec, want := range map[string]bool{
		"uprobe": true, "uprobe/libc.so.6:malloc": true, "uretprobe": true, "uprobe.s": true,
		"usdt": true, "usdt/python3.11:python:function__entry": true, "usdt.s/x:p:n": true,
		"uprobe.multi": true, "uprobe.session": false, "kprobe/do_sys_open": false,
		"uprobefoo": false, "tracepoint/x": false,
	} {
		if got := attach.IsProbeProgram(&ebpf.ProgramSpec{Type: ebpf.Kprobe, SectionName: sec}); got != want {
			t.Errorf("%q: %v, want %v", sec, got, want)
		}
	}
	if attach.IsProbeProgram(&ebpf.ProgramSpec{Type: ebpf.TracePoint, SectionName: "uprobe"}) {
		t.Error("a TracePoint program in a uprobe section")
	}
}

// haveCookie reports whether the kernel has BPF cookies (Linux 5.15).
// Without them the tests attach their sites with cookie 0 (what attach
// allows there) and the counter counts every hit under 0.
func haveCookie(t *testing.T) bool {
	t.Helper()
	ok, err := features.Have(features.Cookie)
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		testkit.MissingFeature(t, features.Cookie.Since(), features.Cookie.String())
	}
	return ok
}

// cookie is c on a kernel with BPF cookies, else 0.
func cookie(t *testing.T, c uint64) uint64 {
	if haveCookie(t) {
		return c
	}
	return 0
}

// counter builds a program that counts hits per BPF cookie (all under 0
// on a kernel without cookies), as spec.
func counter(t *testing.T) (*ebpf.ProgramSpec, *ebpf.Map) {
	t.Helper()
	getCookie := asm.FnGetAttachCookie.Call()
	if !haveCookie(t) {
		getCookie = asm.Mov.Imm(asm.R0, 0)
	}
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: 8, ValueSize: 8, MaxEntries: 64})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return &ebpf.ProgramSpec{
		Name: "count_cookie", Type: ebpf.Kprobe, SectionName: "uprobe", License: "GPL",
		Instructions: asm.Instructions{
			getCookie,
			asm.StoreMem(asm.RFP, -8, asm.R0, asm.DWord),
			asm.Mov.Imm(asm.R1, 0),
			asm.StoreMem(asm.RFP, -16, asm.R1, asm.DWord),
			asm.LoadMapPtr(asm.R1, m.FD()),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, -8),
			asm.Mov.Reg(asm.R3, asm.RFP),
			asm.Add.Imm(asm.R3, -16),
			asm.Mov.Imm(asm.R4, 1), // BPF_NOEXIST: the first hit inserts 0
			asm.FnMapUpdateElem.Call(),
			asm.LoadMapPtr(asm.R1, m.FD()),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, -8),
			asm.FnMapLookupElem.Call(),
			asm.JEq.Imm(asm.R0, 0, "out"),
			asm.Mov.Imm(asm.R1, 1),
			asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
			asm.Mov.Imm(asm.R0, 0).WithSymbol("out"),
			asm.Return(),
		},
	}, m
}

func load(t *testing.T, spec *ebpf.ProgramSpec, prepare bool) *ebpf.Program {
	t.Helper()
	spec = spec.Copy()
	if prepare {
		if err := attach.Prepare(&ebpf.CollectionSpec{Programs: map[string]*ebpf.ProgramSpec{spec.Name: spec}}); err != nil {
			t.Fatal(err)
		}
	}
	prog, err := ebpf.NewProgram(spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { prog.Close() })
	return prog
}

func count(t *testing.T, m *ebpf.Map, cookie uint64) uint64 {
	t.Helper()
	var n uint64
	if err := m.Lookup(cookie, &n); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		t.Fatal(err)
	}
	return n
}

type mode struct {
	name  string
	multi bool
}

func modes(t *testing.T) []mode {
	ms := []mode{{"perf-event", false}}
	if ok, _ := features.Have(features.UprobeMulti); ok {
		ms = append(ms, mode{"uprobe_multi", true})
	}
	return ms
}

func use(t *testing.T, m mode) {
	if !m.multi {
		t.Cleanup(features.ForceOff(features.UprobeMulti))
	}
}

// Two sites of the fixture with their own cookies fire exactly as often as
// the fixture calls them, in the process filtered to and not in a twin;
// Close detaches them.
func TestAttachFires(t *testing.T) {
	testkit.RequireKernel(t)
	for _, m := range modes(t) {
		t.Run(m.name, func(t *testing.T) {
			use(t, m)
			spec, counts := counter(t)
			prog := load(t, spec, true)
			path := testkit.Fixture("usdt_sample")
			_, loop := testkit.SymbolOffset(t, path, "fire_loop")
			p := testkit.Start(t, path)
			twin := testkit.Start(t, path)
			tg, err := procmaps.OpenTarget(path)
			if err != nil {
				t.Fatal(err)
			}
			defer tg.Close()
			l, err := attach.Attach(prog, []attach.File{{Path: tg.FDPath(), Name: path, Sites: []attach.Site{
				{Probe: "entry of fire_loop", Offset: loop, Cookie: cookie(t, 7)},
			}}}, &attach.Options{PID: p.PID()})
			if err != nil {
				t.Fatal(err)
			}
			if s := l.Sites(); len(s) != 1 || s[0].Path != path || s[0].Offset != loop || s[0].Cookie != cookie(t, 7) {
				t.Errorf("sites %+v", s)
			}
			want := link.PerfEventType
			if m.multi {
				want = link.UprobeMultiType
			}
			if info, err := l.Info(); errors.Is(err, ebpf.ErrNotSupported) && !m.multi {
				// Perf-event uprobes are BPF links from Linux 5.15;
				// before, cilium/ebpf attaches them by ioctl.
				testkit.MissingFeature(t, "5.15", "BPF links for perf-event uprobes")
			} else if err != nil || info.Type != want {
				t.Errorf("link info %v, %v; want type %v", info, err, want)
			}
			released := 0
			l.OnClose(func() error { released++; return nil })
			if err := p.Loop("loop", 21); err != nil {
				t.Fatal(err)
			}
			if err := twin.Loop("loop", 5); err != nil {
				t.Fatal(err)
			}
			if n := count(t, counts, cookie(t, 7)); n != 21 {
				t.Errorf("%d hits, want 21 (the twin's 5 filtered out)", n)
			}
			if err := l.Close(); err != nil || released != 1 {
				t.Fatalf("close: %v, released %d", err, released)
			}
			if err := l.Close(); err != nil || released != 1 {
				t.Fatalf("second close: %v, released %d", err, released)
			}
			if err := p.Loop("loop", 3); err != nil {
				t.Fatal(err)
			}
			if n := count(t, counts, cookie(t, 7)); n != 21 {
				t.Errorf("%d hits after Close, want 21", n)
			}
		})
	}
}

// A failing file leaves nothing of the files before it attached, and the
// error names the site as the caller named its file.
func TestAttachAllOrNothing(t *testing.T) {
	testkit.RequireKernel(t)
	for _, m := range modes(t) {
		t.Run(m.name, func(t *testing.T) {
			use(t, m)
			spec, counts := counter(t)
			prog := load(t, spec, true)
			path := testkit.Fixture("usdt_sample")
			_, loop := testkit.SymbolOffset(t, path, "fire_loop")
			p := testkit.Start(t, path)
			st, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			_, err = attach.Attach(prog, []attach.File{
				{Path: path, Name: "good", Sites: []attach.Site{{Probe: "entry of fire_loop", Offset: loop, Cookie: cookie(t, 1)}}},
				{Path: path, Name: "my-binary", Sites: []attach.Site{{Probe: "entry of nothing", Offset: uint64(st.Size()) + 4096, Cookie: cookie(t, 2)}}},
			}, &attach.Options{PID: p.PID()})
			if err == nil || !strings.Contains(err.Error(), "my-binary") || !strings.Contains(err.Error(), "entry of nothing") {
				t.Fatalf("error %v, want one naming my-binary and the probe", err)
			}
			if err := p.Loop("loop", 4); err != nil {
				t.Fatal(err)
			}
			if n := count(t, counts, cookie(t, 1)); n != 0 {
				t.Errorf("the first file's site fired %d times after a failed attach", n)
			}
		})
	}
}

// A program loaded without Prepare is refused before anything attaches,
// and so is one prepared for uprobe_multi once uprobe_multi is ruled out.
func TestNotPrepared(t *testing.T) {
	testkit.RequireKernel(t)
	ok, err := features.Have(features.UprobeMulti)
	testkit.NeedFeature(t, ok, err, features.UprobeMulti.Since(), features.UprobeMulti.String())
	spec, _ := counter(t)
	path := testkit.Fixture("usdt_sample")
	_, loop := testkit.SymbolOffset(t, path, "fire_loop")
	files := []attach.File{{Path: path, Name: path, Sites: []attach.Site{{Probe: "entry of fire_loop", Offset: loop}}}}

	raw := load(t, spec, false)
	if features.LoadedForUprobeMulti(raw.FD()) {
		t.Fatal("a program loaded without Prepare reported as uprobe_multi")
	}
	_, err = attach.Attach(raw, files, nil)
	if !errors.Is(err, attach.ErrNotPrepared) || !strings.Contains(err.Error(), "count_cookie") {
		t.Errorf("unprepared: %v, want ErrNotPrepared naming the program", err)
	}

	prepared := load(t, spec, true)
	if !features.LoadedForUprobeMulti(prepared.FD()) {
		t.Fatal("a prepared program not reported as uprobe_multi")
	}
	restore := features.ForceOff(features.UprobeMulti)
	defer restore()
	if _, err := attach.Attach(prepared, files, nil); !errors.Is(err, attach.ErrNotPrepared) {
		t.Errorf("prepared for uprobe_multi, attached without it: %v, want ErrNotPrepared", err)
	}
}

func TestAttachRefusals(t *testing.T) {
	if _, err := attach.Attach(nil, nil, nil); err == nil {
		t.Error("nil program accepted")
	}
	testkit.RequireKernel(t)
	spec, _ := counter(t)
	prog := load(t, spec, true)
	if _, err := attach.Attach(prog, nil, &attach.Options{PID: -1}); err == nil {
		t.Error("negative PID accepted")
	}
	if _, err := attach.Attach(prog, nil, nil); err == nil {
		t.Error("no site accepted")
	}
}

// Close of a joined link closes its parts; errors of every part are
// joined.
func TestJoin(t *testing.T) {
	a, b := &attach.Link{}, &attach.Link{}
	var order []string
	a.OnClose(func() error { order = append(order, "a"); return errors.New("a failed") })
	b.OnClose(func() error { order = append(order, "b"); return nil })
	j := attach.Join(a, b)
	err := j.Close()
	if err == nil || !strings.Contains(err.Error(), "a failed") || len(order) != 2 {
		t.Fatalf("join close: %v, order %v", err, order)
	}
	if err := j.Close(); err != nil || len(order) != 2 {
		t.Fatalf("second close: %v, order %v", err, order)
	}
	if err := j.Pin("/sys/fs/bpf/x"); !errors.Is(err, ebpf.ErrNotSupported) {
		t.Errorf("pin: %v", err)
	}
}
