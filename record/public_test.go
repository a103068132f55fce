package record_test

import (
	"errors"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"github.com/cilium/ebpf/ringbuf"

	"github.com/probekit/probekit/internal/features"
	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/procmaps"
	"github.com/probekit/probekit/record"
	"github.com/probekit/probekit/uprobe"
)

// TestPublicUse: the package as a Go program outside the module's
// command uses it, through its exported API only: prepare and load the
// record program, attach its function program to sum6 of a launched
// fixture through package uprobe, read the ring and decode each hit's
// arguments.
func TestPublicUse(t *testing.T) {
	testkit.RequireKernel(t)
	if runtime.GOARCH != "amd64" {
		t.Skip("the fixture is built for x86-64")
	}
	// The function program finds its probe in the BPF cookie.
	ok, err := features.Have(features.Cookie)
	testkit.NeedFeature(t, ok, err, features.Cookie.Since(), features.Cookie.String())
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
	defer objs.Close()
	rd, err := ringbuf.NewReader(objs.Events)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()

	cmd := exec.Command(testkit.Fixture("func_args"), "4")
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
	cookie, err := record.FuncCookie(7, record.RegsC, record.KindUprobe, 0)
	if err != nil {
		t.Fatal(err)
	}
	l, err := bin.Entry("sum6", objs.FuncProgram, &uprobe.Options{Cookie: cookie})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := launched.Finish(nil); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}

	var got []record.Event
	var rec ringbuf.Record
	for deadline := time.Now().Add(10 * time.Second); len(got) < 4 && time.Now().Before(deadline); {
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
		got = append(got, ev)
	}
	if len(got) != 4 {
		t.Fatalf("%d hits, want 4", len(got))
	}
	for r, ev := range got {
		want := [6]int64{int64(r), -2, 300, -40000, 5000000000, -6000000000}
		if ev.Kind != record.KindUprobe || ev.Cookie != 7 || int(ev.PID) != cmd.Process.Pid || ev.NArgs != 6 || [6]int64(ev.Args[:6]) != want {
			t.Errorf("hit %d: %+v; want cookie 7, pid %d, args %v", r, ev, cmd.Process.Pid, want)
		}
	}
}
