package record_test

import (
	"errors"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/probekit/probekit/internal/features"
	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/procmaps"
	"github.com/probekit/probekit/record"
	"github.com/probekit/probekit/uprobe"
)

// TestPublicUse: the package as a Go program outside the module's
// command uses it, through its exported API only: prepare and load the
// record program, attach its function program to sum6 (entry and
// returns) and count_char of a launched fixture through package uprobe,
// read the ring and decode each hit's values.
func TestPublicUse(t *testing.T) {
	testkit.RequireKernel(t)
	// The function program finds its probe in the BPF cookie.
	ok, err := features.Have(features.Cookie)
	testkit.NeedFeature(t, ok, err, features.Cookie.Since(), features.Cookie.String())
	publicUse(t)
}

// TestPublicUseNoCookie: the same where the kernel has no BPF cookies
// (before 5.15; forced off on newer kernels): the function program finds
// each site's probe in FuncIPs, keyed by the launched process and the
// runtime address, and a uprobe's return probe goes on sum6's return
// instruction. A path-wide probe on the position-independent fixture is
// refused, naming the feature; the table is empty once the links close.
func TestPublicUseNoCookie(t *testing.T) {
	testkit.RequireKernel(t)
	defer features.ForceOff(features.Cookie)()
	objs, links := publicUse(t)
	var ips int
	var k uprobe.AddressKey
	var v uint64
	for it := objs.FuncIPs.Iterate(); it.Next(&k, &v); {
		ips++
	}
	// sum6's entry, count_char's and sum6's return instructions.
	if ips < 3 {
		t.Errorf("FuncIPs holds %d sites, want 3 or more", ips)
	}
	for _, l := range links {
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	bin, err := uprobe.Open(testkit.Fixture("func_args"))
	if err != nil {
		t.Fatal(err)
	}
	defer bin.Close()
	cookie, err := record.FuncCookie(1, record.RegsC, record.KindUprobe, 0)
	if err != nil {
		t.Fatal(err)
	}
	l, err := bin.Entry("sum6", objs.FuncProgram, &uprobe.Options{Cookie: cookie, AddressTable: objs.FuncIPs})
	if err == nil {
		l.Close()
		t.Fatal("a path-wide probe on a PIE attached without cookies")
	}
	if !errors.Is(err, ebpf.ErrNotSupported) || !strings.Contains(err.Error(), "5.15") {
		t.Errorf("path-wide PIE probe: %v; want ErrNotSupported naming Linux 5.15", err)
	}
	if it := objs.FuncIPs.Iterate(); it.Next(&k, &v) {
		t.Errorf("FuncIPs still holds pid %d %#x -> %#x after the links closed", k.PID, k.IP, v)
	}
}

// publicUse loads the record program as Prepare says for this kernel
// (or what is forced off), traces three probes of a launched func_args
// and checks every hit; it returns the objects and the links, closed at
// the test's end.
func publicUse(t *testing.T) (*record.Objects, []*uprobe.Link) {
	t.Helper()
	if runtime.GOARCH != "amd64" {
		t.Skip("the fixture is built for x86-64")
	}
	spec, err := record.Spec()
	if err != nil {
		t.Fatal(err)
	}
	if err := uprobe.Prepare(spec); err != nil {
		t.Fatal(err)
	}
	if err := record.SetRingSize(spec, record.DefaultRingSize, os.Getpagesize()); err != nil {
		t.Fatal(err)
	}
	objs, err := record.LoadSpec(spec, record.FuncProgram)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { objs.Close() })
	rd, err := ringbuf.NewReader(objs.Events)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()

	const rounds = 4
	cmd := exec.Command(testkit.Fixture("func_args"), strconv.Itoa(rounds))
	launched, err := procmaps.Launch(cmd) // stopped after exec
	if err != nil {
		t.Fatal(err)
	}
	defer launched.Finish(errors.New("test over"))
	bin, err := uprobe.OpenProcess(launched.Process, cmd.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer bin.Close()
	var links []*uprobe.Link
	attachFn := func(sym string, index uint32, regs record.Regs, kind record.Kind) {
		t.Helper()
		cookie, err := record.FuncCookie(index, regs, kind, 0)
		if err != nil {
			t.Fatal(err)
		}
		opts := &uprobe.Options{Cookie: cookie, AddressTable: objs.FuncIPs}
		var l *uprobe.Link
		if kind == record.KindUretprobe {
			fn, ferr := bin.Function(sym)
			if ferr != nil {
				t.Fatal(ferr)
			}
			l, err = bin.Returns([]uprobe.Function{fn}, objs.FuncProgram, opts)
		} else {
			l, err = bin.Entry(sym, objs.FuncProgram, opts)
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		links = append(links, l)
	}
	attachFn("sum6", 7, record.RegsC, record.KindUprobe)
	attachFn("sum6", 8, record.RegsRet, record.KindUretprobe)
	attachFn("count_char", 9, record.RegsC, record.KindUprobe)
	if err := launched.Finish(nil); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}

	byCookie := map[uint64][]record.Event{}
	var rec ringbuf.Record
	for n, deadline := 0, time.Now().Add(10*time.Second); n < 3*rounds && time.Now().Before(deadline); {
		rd.SetDeadline(time.Now().Add(100 * time.Millisecond))
		if err := rd.ReadInto(&rec); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				continue
			}
			t.Fatal(err)
		}
		var ev record.Event
		if err := ev.Decode(rec.RawSample); err != nil {
			t.Fatal(err)
		}
		byCookie[ev.Cookie] = append(byCookie[ev.Cookie], ev)
		n++
	}
	pid := cmd.Process.Pid
	for _, c := range []uint64{7, 8, 9} {
		if len(byCookie[c]) != rounds {
			t.Fatalf("probe %d: %d hits, want %d (all: %v)", c, len(byCookie[c]), rounds, byCookie)
		}
	}
	for r, ev := range byCookie[7] {
		want := [6]int64{int64(r), -2, 300, -40000, 5000000000, -6000000000}
		if ev.Kind != record.KindUprobe || int(ev.PID) != pid || ev.NArgs != 6 || [6]int64(ev.Args[:6]) != want {
			t.Errorf("sum6 entry %d: %+v; want pid %d, args %v", r, ev, pid, want)
		}
	}
	for r, ev := range byCookie[8] {
		if want := int64(r) - 1000039702; ev.Kind != record.KindUretprobe || int(ev.PID) != pid || ev.NArgs != 1 || ev.Args[0] != want {
			t.Errorf("sum6 return %d: %+v; want pid %d, %d", r, ev, pid, want)
		}
	}
	for r, ev := range byCookie[9] {
		if ev.Kind != record.KindUprobe || int(ev.PID) != pid || ev.Args[1] != '-' {
			t.Errorf("count_char entry %d: %+v; want pid %d, second argument '-'", r, ev, pid)
		}
	}
	return objs, links
}
