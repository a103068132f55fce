package bpf_test

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf/ringbuf"

	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/procmaps"
	"github.com/probekit/probekit/unwind"
	"github.com/probekit/probekit/uprobe"
)

// BenchmarkStackHit is the cost to the traced program of one hit at
// the entry of chain_end in the -fomit-frame-pointer fixture (ns/op is
// per hit, the fixture's loop timed): no probe; the bare uprobe (an
// empty program); the frame-pointer stack sent through the ring
// (probekit_user_stack, 127 frames); the frame-pointer stack counted in
// the kernel (probekit_count_user_stack); and the copied stack top sent
// through the ring for user-space unwinding (probekit_copy_stack, 16
// KiB; probekit_copy_stack_pages with 2 pages and 1). Ring events are
// drained meanwhile; drops are reported.
// cpu-ns/hit is the fixture's own CPU time per hit (the handler runs in
// its context; /proc/PID/schedstat's first field), which other load on
// the machine does not inflate as it does the wall time.
func BenchmarkStackHit(b *testing.B) {
	fx := testkit.Fixture("stack_chain_nofp")
	b.Run("no_probe", func(b *testing.B) {
		p := testkit.Start(b, fx)
		b.ResetTimer()
		loopCPU(b, p)
	})
	for _, prog := range []string{"stack_bare", "stack_plain", "stack_count", "stack_copy_only", "stack_copy_2pages", "stack_copy_1page"} {
		b.Run(prog, func(b *testing.B) {
			r := newStackRig(b)
			p := testkit.Start(b, fx)
			up, err := uprobe.Open(fx)
			if err != nil {
				b.Fatal(err)
			}
			defer up.Close()
			l, err := up.Entry("chain_end", r.coll.Programs[prog], &uprobe.Options{PID: p.PID()})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			var got atomic.Int64
			stop := make(chan struct{})
			drained := make(chan struct{})
			go func() {
				defer close(drained)
				var rec ringbuf.Record
				for {
					select {
					case <-stop:
						return
					default:
					}
					r.rd.SetDeadline(time.Now().Add(50 * time.Millisecond))
					if r.rd.ReadInto(&rec) == nil {
						got.Add(1)
					}
				}
			}()
			b.ResetTimer()
			loopCPU(b, p)
			b.StopTimer()
			close(stop)
			<-drained
			if prog != "stack_bare" && prog != "stack_count" {
				b.ReportMetric(float64(int64(b.N)-got.Load())/float64(b.N), "dropped/op")
			}
		})
	}
}

// loopCPU fires chain b.N times and reports the fixture's CPU time per hit.
func loopCPU(b *testing.B, p *testkit.Process) {
	b.Helper()
	before := schedNS(b, p.PID())
	if err := p.Loop("chain", b.N); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(schedNS(b, p.PID())-before)/float64(b.N), "cpu-ns/hit")
}

// schedNS is the time pid has run on a CPU, in ns (the first field of
// /proc/PID/schedstat).
func schedNS(b *testing.B, pid int) int64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
	if err != nil {
		b.Fatal(err)
	}
	f := strings.Fields(string(raw))
	n, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		b.Fatal(err)
	}
	return n
}

// BenchmarkUnwindSample is the user-space side of a copied stack: one
// Unwind of the fixture's hit at chain_end (10 frames, down to _start)
// with the process's tables loaded.
func BenchmarkUnwindSample(b *testing.B) {
	r := newStackRig(b)
	fx := testkit.Fixture("stack_chain_nofp")
	p := testkit.Start(b, fx)
	up, err := uprobe.Open(fx)
	if err != nil {
		b.Fatal(err)
	}
	defer up.Close()
	l, err := up.Entry("chain_end", r.coll.Programs["stack_copy"], &uprobe.Options{PID: p.PID()})
	if err != nil {
		b.Fatal(err)
	}
	p.Fire("chain", 1)
	l.Close()
	ev := r.copies(b, 1)[0]
	proc, err := procmaps.Open(p.PID())
	if err != nil {
		b.Fatal(err)
	}
	objs, err := unwind.NewCache().Process(proc)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	var n int
	for b.Loop() {
		n = len(ev.sample.Unwind(objs).Frames)
	}
	b.ReportMetric(float64(n), "frames")
}
