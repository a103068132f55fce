package follow

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/probekit/probekit/internal/test/bpftest"
	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/usdt"
)

// percentiles reports the p50 and p99 of ds as metrics named unit.
func percentiles(b *testing.B, ds []time.Duration, name string) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2].Microseconds()), name+"-p50-µs")
	b.ReportMetric(float64(ds[len(ds)*99/100].Microseconds()), name+"-p99-µs")
}

// BenchmarkTreeExecHeld: how long a process of a launched tree stays
// stopped, at its fork (while the tree attaches its probes) and at its
// execve (named files keep their links), from the tracer's wakeup: b.N
// processes started by a shell.
func BenchmarkTreeExecHeld(b *testing.B) {
	h := newHitRecorder(b)
	fx := testkit.Fixture("follow_ticker")
	var mu sync.Mutex
	var held []time.Duration
	script := "i=0; while [ $i -lt " + strconv.Itoa(b.N) + " ]; do " + fx + " 0 >/dev/null; i=$((i+1)); done"
	b.ResetTimer()
	tr, err := launchHeld(exec.Command("/bin/sh", "-c", script), []Probe{h.probe(fx, "follow", "tick", 1)}, &Options{Attacher: h.att}, func(d time.Duration) {
		mu.Lock()
		held = append(held, d)
		mu.Unlock()
	})
	if err != nil {
		b.Fatal(err)
	}
	<-tr.Exited()
	b.StopTimer()
	tr.Close()
	percentiles(b, held, "exec-held")
}

// launchHeld is Launch with the held hook set before the command starts.
func launchHeld(cmd *exec.Cmd, probes []Probe, opts *Options, held func(time.Duration)) (*Tree, error) {
	heldHook = held
	defer func() { heldHook = nil }()
	return Launch(cmd, probes, opts)
}

// BenchmarkWatchHostExecToAttached: time from starting a process (fork
// and exec included) to the host watch's attach of its binary, a new copy
// each time (a file never seen).
func BenchmarkWatchHostExecToAttached(b *testing.B) {
	h := newHitRecorder(b)
	fx := testkit.Fixture("follow_ticker")
	attached := make(chan time.Time, 1)
	w, err := WatchHost([]Probe{h.probe("follow_ticker*", "follow", "tick", 1)}, &Options{Attacher: h.att, Notify: func(e Event) {
		if e.Kind == Attached {
			select {
			case attached <- time.Now():
			default:
			}
		}
	}})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	var lat []time.Duration
	dir := b.TempDir()
	i := 0
	for b.Loop() {
		i++
		bin := filepath.Join(dir, "follow_ticker"+strconv.Itoa(i))
		copyFile(b, fx, bin)
		cmd := exec.Command(bin, "20")
		start := time.Now()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		select {
		case at := <-attached:
			lat = append(lat, at.Sub(start))
		case <-time.After(10 * time.Second):
			b.Fatal("not attached within 10s")
		}
		cmd.Wait()
	}
	percentiles(b, lat, "exec-attached")
}

// hitCounter counts hits in the kernel (bpftest's count_hits): unlike a
// ring of records, it never drops one.
type hitCounter struct {
	objs bpftest.CountObjects
	att  *usdt.Attacher
}

func newHitCounter(b *testing.B) *hitCounter {
	testkit.RequireKernel(b)
	spec, err := bpftest.LoadCount()
	if err != nil {
		b.Fatal(err)
	}
	if err := usdt.Prepare(spec); err != nil {
		b.Fatal(err)
	}
	c := &hitCounter{}
	if err := spec.LoadAndAssign(&c.objs, nil); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.objs.Close() })
	if c.att, err = usdt.NewAttacherWithMaps(spec, c.objs.BpfUsdtSpecs, c.objs.BpfUsdtIpToSpecId); err != nil {
		b.Fatal(err)
	}
	return c
}

func (c *hitCounter) probe(target string) Probe {
	return Probe{Target: target, Provider: "follow", Name: "tick", Program: c.objs.CountHits}
}

// take returns the hits counted since the last take.
func (c *hitCounter) take(b *testing.B) int {
	var n uint64
	if err := c.objs.Counts.Lookup(uint32(0), &n); err != nil {
		b.Fatal(err)
	}
	if err := c.objs.Counts.Put(uint32(0), uint64(0)); err != nil {
		b.Fatal(err)
	}
	return int(n)
}

// BenchmarkMissedHits: the share of follow:tick hits missed by processes
// living 10 ms, 100 ms and 1 s (a tick every 100 µs): under a host watch,
// running a binary never seen (a new copy each time: host-new) or the
// same one again (host-rerun: the file lingers attached), and inside a
// launched tree.
func BenchmarkMissedHits(b *testing.B) {
	fx := testkit.Fixture("follow_ticker")
	for _, life := range []string{"10", "100", "1000"} {
		for _, mode := range []string{"host-new", "host-rerun"} {
			b.Run(mode+"/"+life+"ms", func(b *testing.B) {
				c := newHitCounter(b)
				w, err := WatchHost([]Probe{c.probe("follow_ticker*")}, &Options{Attacher: c.att})
				if err != nil {
					b.Fatal(err)
				}
				defer w.Close()
				c.take(b)
				dir := b.TempDir()
				var fired, seen, i int
				for b.Loop() {
					bin := fx
					if i++; mode == "host-new" {
						bin = filepath.Join(dir, "follow_ticker"+strconv.Itoa(i))
						copyFile(b, fx, bin)
					}
					out, err := exec.Command(bin, life).Output()
					if err != nil {
						b.Fatal(err)
					}
					n, _ := strconv.Atoi(string(bytes.TrimSpace(out)))
					fired += n
					seen += c.take(b)
				}
				b.ReportMetric(100*float64(fired-seen)/float64(max(fired, 1)), "%missed")
			})
		}
		b.Run("tree/"+life+"ms", func(b *testing.B) {
			c := newHitCounter(b)
			var fired, seen int
			for b.Loop() {
				var out bytes.Buffer
				cmd := exec.Command(fx, life)
				cmd.Stdout = &out
				tr, err := Launch(cmd, []Probe{c.probe(fx)}, &Options{Attacher: c.att})
				if err != nil {
					b.Fatal(err)
				}
				<-tr.Exited()
				tr.Close()
				n, _ := strconv.Atoi(string(bytes.TrimSpace(out.Bytes())))
				fired += n
				seen += c.take(b)
			}
			b.ReportMetric(100*float64(fired-seen)/float64(max(fired, 1)), "%missed")
		})
	}
}

// copyFile copies the executable src to dst: a new inode.
func copyFile(b *testing.B, src, dst string) {
	data, err := os.ReadFile(src)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(dst, data, 0o755); err != nil {
		b.Fatal(err)
	}
}

// cpuTime is this process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkWatcherCPU: CPU time this process spends per 1,000 process
// starts elsewhere on the host (a shell running /bin/true: its CPU is its
// own), for a host watch, and for a launched tree that attaches a probe
// in each of them. Per op: 1,000 starts.
func BenchmarkWatcherCPU(b *testing.B) {
	const starts = 1000
	script := "i=0; while [ $i -lt " + strconv.Itoa(starts) + " ]; do /bin/true; i=$((i+1)); done"
	fx := testkit.Fixture("follow_ticker")
	b.Run("none", func(b *testing.B) {
		var cpu time.Duration
		for b.Loop() {
			c0 := cpuTime()
			if err := exec.Command("/bin/sh", "-c", script).Run(); err != nil {
				b.Fatal(err)
			}
			cpu += cpuTime() - c0
		}
		b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "cpu-ms/1000starts")
	})
	b.Run("host", func(b *testing.B) {
		h := newHitRecorder(b)
		w, err := WatchHost([]Probe{h.probe(filepath.Base(fx), "follow", "tick", 1)}, &Options{Attacher: h.att})
		if err != nil {
			b.Fatal(err)
		}
		defer w.Close()
		var cpu time.Duration
		for b.Loop() {
			c0 := cpuTime()
			if err := exec.Command("/bin/sh", "-c", script).Run(); err != nil {
				b.Fatal(err)
			}
			cpu += cpuTime() - c0
		}
		b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "cpu-ms/1000starts")
	})
	b.Run("tree", func(b *testing.B) {
		h := newHitRecorder(b)
		var cpu time.Duration
		for b.Loop() {
			c0 := cpuTime()
			tr, err := Launch(exec.Command("/bin/sh", "-c", script), []Probe{h.probe(fx, "follow", "tick", 1)}, &Options{Attacher: h.att})
			if err != nil {
				b.Fatal(err)
			}
			<-tr.Exited()
			tr.Close()
			cpu += cpuTime() - c0
		}
		b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "cpu-ms/1000starts")
	})
}
