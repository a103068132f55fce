package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/probekit/probekit/internal/features"
	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/probe"
	"github.com/probekit/probekit/record"
)

type countLine struct {
	Probe string `json:"probe"`
	Count uint64 `json:"count"`
}

type histLine struct {
	Probe   string `json:"probe"`
	Buckets []struct {
		Low   int64  `json:"low"`
		High  uint64 `json:"high"`
		Count uint64 `json:"count"`
	} `json:"buckets"`
}

// aggregateJSON runs probekit trace --json with args and decodes each
// line into a new T, but for trace -f's attach and detach objects
// ("kind").
func aggregateJSON[T any](t *testing.T, args ...string) []T {
	t.Helper()
	r := runTraceCmd(append([]string{"--json"}, args...)...)
	if r.code != 0 {
		t.Fatalf("probekit trace %v: exit %d: %s", args, r.code, r.errOut)
	}
	var out []T
	for _, line := range strings.Split(strings.TrimSpace(r.out), "\n") {
		if strings.HasPrefix(line, `{"kind":`) {
			continue
		}
		var v T
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		out = append(out, v)
	}
	return out
}

// histOf returns h's buckets as counts by bucket number.
func histOf(t *testing.T, h histLine) record.Histogram {
	t.Helper()
	var out record.Histogram
	for _, b := range h.Buckets {
		i := record.Bucket(b.Low)
		if low, high := record.BucketRange(i); low != b.Low || high != b.High || b.Count == 0 {
			t.Fatalf("%s: bucket %+v", h.Probe, b)
		}
		out[i] = b.Count
	}
	return out
}

// --count of USDT probes: sample:loop fires once per round, sample:sizes
// never; both are listed, in the order named.
func TestTraceCount(t *testing.T) {
	testkit.RequireKernel(t)
	fx := testkit.Fixture("usdt_sample")
	const n = 5000
	got := aggregateJSON[countLine](t, "--count", fx+":sample:loop", fx+":sample:sizes", "--", fx, "--loop", "loop", itoa(n))
	want := []countLine{{"sample:loop", n}, {"sample:sizes", 0}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("counts %+v, want %+v", got, want)
	}
}

// --hist 1 of sample:loop: round r passes r as its first argument, so
// the histogram holds 0 to n-1, each in its log2 bucket.
func TestTraceHistUSDT(t *testing.T) {
	testkit.RequireKernel(t)
	fx := testkit.Fixture("usdt_sample")
	const n = 3000
	got := aggregateJSON[histLine](t, "--hist", "1", fx+":sample:loop", "--", fx, "--loop", "loop", itoa(n))
	var want record.Histogram
	for r := range int64(n) {
		want[record.Bucket(r)]++
	}
	if len(got) != 1 || got[0].Probe != "sample:loop" || histOf(t, got[0]) != want {
		t.Errorf("histogram %+v, want %v", got, want)
	}
	// The third argument is -r: zero once, then negative.
	got = aggregateJSON[histLine](t, "--hist", "3", fx+":sample:loop", "--", fx, "--loop", "loop", itoa(n))
	want = record.Histogram{0: n - 1, 1: 1}
	if len(got) != 1 || histOf(t, got[0]) != want {
		t.Errorf("histogram of -r %+v, want %v", got, want)
	}
}

// Function probes: counts of sum6 and count_char, one per round; a
// histogram of sum6's first argument (the round), of its return value
// (round - 1000039702: negative) and of malloc's size in libc
// (4242 + round: all in [4K, 8K)).
func TestTraceCountFunc(t *testing.T) {
	testkit.RequireKernel(t)
	requireAMD64(t)
	fx := testkit.Fixture("func_args")
	const n = 200
	counts := aggregateJSON[countLine](t, "--count", "uprobe:"+fx+":sum6", "uprobe:"+fx+":count_char", "uretprobe:"+fx+":count_char", "--", fx, itoa(n))
	want := []countLine{{"uprobe:sum6", n}, {"uprobe:count_char", n}, {"uretprobe:count_char", n}}
	if len(counts) != len(want) {
		t.Fatalf("counts %+v, want %+v", counts, want)
	}
	for i := range want {
		if counts[i] != want[i] {
			t.Errorf("counts %+v, want %+v", counts, want)
		}
	}

	hists := aggregateJSON[histLine](t, "--hist", "1", "uprobe:"+fx+":sum6", "--", fx, itoa(n))
	var wantHist record.Histogram
	for r := range int64(n) {
		wantHist[record.Bucket(r)]++
	}
	if len(hists) != 1 || hists[0].Probe != "uprobe:sum6" || histOf(t, hists[0]) != wantHist {
		t.Errorf("histogram of sum6's round %+v, want %v", hists, wantHist)
	}

	hists = aggregateJSON[histLine](t, "--hist", "ret", "uretprobe:"+fx+":sum6", "--", fx, itoa(n))
	if len(hists) != 1 || histOf(t, hists[0]) != (record.Histogram{0: n}) {
		t.Errorf("histogram of sum6's negative results %+v", hists)
	}

	hists = aggregateJSON[histLine](t, append(launchedLibrary(t), "--hist", "1", "uprobe:libc.so.6:malloc", "--", fx, itoa(n))...)
	if len(hists) != 1 || histOf(t, hists[0])[record.Bucket(4096)] != n {
		t.Errorf("histogram of malloc sizes %+v, want %d in [4096, 8192)", hists, n)
	}
}

func TestParseTraceAggregate(t *testing.T) {
	req, err := parseTrace([]string{"--hist", "ret", "-i", "2", "uretprobe:libc.so.6:malloc"})
	if err != nil || req.Mode != record.ModeHist || !req.HistValue.IsRet() || req.Interval != 2*time.Second {
		t.Errorf("--hist ret: %+v, %v", req, err)
	}
	req, err = parseTrace([]string{"--hist", "3", "x:p:n"})
	if err != nil || req.Mode != record.ModeHist || req.HistValue != probe.Arg(3) {
		t.Errorf("--hist 3: %+v, %v", req, err)
	}
	for _, args := range [][]string{
		{"--count", "--hist", "1", "x:p:n"},
		{"--hist", "0", "x:p:n"},
		{"--hist", "13", "x:p:n"},
		{"--hist", "ret", "x:p:n"},
		{"--hist", "1", "uretprobe:x:f"},
		{"--count", "-n", "3", "x:p:n"},
		{"--count", "--str", "1", "x:p:n"},
		{"-i", "1", "x:p:n"},
		{"--count", "-i", "-1", "x:p:n"},
	} {
		if _, err := parseTrace(args); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}

// BenchmarkTraceCount compares what a hit of sample:loop costs the traced
// program: under a bare program that only counts (the floor of a uprobe
// with a BPF program: internal/test/bpftest's count_hits), under probekit
// trace --count, and under probekit trace printing every hit (as
// BenchmarkTraceHit/trace), beside bpftrace's one-liners for the same
// hits (a keyed count, a filter that drops every hit) and, on
// testdata/latency, --latency of a USDT pair and of a function's entry
// and return beside bpftrace's @start[tid] idiom. cpu-ns/hit is the
// fixture's own CPU time per hit, cpu-ns/pair per pair of hits. Run:
//
//	go test -run '^$' -bench BenchmarkTraceCount -benchtime 200000x ./cmd/probekit/
func BenchmarkTraceCount(b *testing.B) {
	testkit.RequireKernel(b)
	fixture := testkit.Fixture("usdt_sample")
	// prog-ns/hit: the BPF programs' own run time (Linux 5.8), apart
	// from the trap that every case pays.
	if stats, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME); err == nil {
		defer stats.Close()
	}
	b.Run("bare", func(b *testing.B) {
		p := testkit.Start(b, fixture)
		attachCount(b, p, fixture, "count_hits")
		b.ResetTimer()
		loopCPU(b, p)
	})
	b.Run("trace_count", func(b *testing.B) { benchTraceCount(b, fixture, true) })
	// Keyed counts, one key each: a hash lookup per hit.
	b.Run("trace_count_by_comm", func(b *testing.B) { benchTraceCount(b, fixture, true, "--by", "comm") })
	b.Run("trace_count_by_pid_comm", func(b *testing.B) { benchTraceCount(b, fixture, true, "--by", "pid,comm") })
	// Every hit filtered out in the kernel (-r is never positive): by
	// one comparison, and by the first of two.
	b.Run("trace_count_filtered_out", func(b *testing.B) { benchTraceCount(b, fixture, false, "--filter", "arg3 > 0") })
	b.Run("trace_count_filtered_out_perf_event", func(b *testing.B) {
		defer features.ForceOff(features.UprobeMulti)()
		benchTraceCount(b, fixture, false, "--filter", "arg3 > 0")
	})
	b.Run("trace_count_filtered_out_2", func(b *testing.B) {
		benchTraceCount(b, fixture, false, "--filter", "arg3 > 0 && comm == \"x\"")
	})
	// Filtered out by pid (the fixture is not pid 1): one helper call
	// (bpf_get_current_pid_tgid) and no argument read; the floor of a
	// USDT argument term, which calls one helper as well, for its spec
	// id (bpf_get_attach_cookie), where bpftrace's program has the
	// argument's register compiled in and calls none.
	b.Run("trace_count_filtered_out_pid", func(b *testing.B) { benchTraceCount(b, fixture, false, "--filter", "pid == 1") })
	b.Run("trace", func(b *testing.B) { benchTraceHit(b, fixture) })
	// bpftrace's one-liners for the same hits (sample:zero, attached
	// last, tells that its probes are attached).
	marker := "usdt:" + fixture + ":sample:zero"
	b.Run("bpftrace_count_by_comm", func(b *testing.B) {
		benchBpftrace(b, fixture, "loop", "cpu-ns/hit", fmt.Sprintf("usdt:%s:sample:loop { @[comm] = count(); }", fixture), marker, "zero")
	})
	// The cast: bpftrace 0.17 compares the argument, -r, as unsigned.
	b.Run("bpftrace_count", func(b *testing.B) {
		benchBpftrace(b, fixture, "loop", "cpu-ns/hit", fmt.Sprintf("usdt:%s:sample:loop { @ = count(); }", fixture), marker, "zero")
	})
	b.Run("bpftrace_count_filtered_out", func(b *testing.B) {
		benchBpftrace(b, fixture, "loop", "cpu-ns/hit", fmt.Sprintf("usdt:%s:sample:loop /(int64)arg2 > 0/ { @ = count(); }", fixture), marker, "zero")
	})
	// The same on a function probe: fire_loop(r), the function around
	// sample:loop, whose argument is never negative.
	b.Run("trace_count_filtered_out_func", func(b *testing.B) {
		benchTraceCountProbe(b, fixture, "uprobe:"+fixture+":fire_loop", false, "--filter", "arg1 < 0")
	})
	b.Run("bpftrace_count_filtered_out_func", func(b *testing.B) {
		benchBpftrace(b, fixture, "loop", "cpu-ns/hit", fmt.Sprintf("uprobe:%s:fire_loop /(int64)arg0 < 0/ { @ = count(); }", fixture), marker, "zero")
	})
	// Latency: a pair of USDT hits (lat:start, lat:done) and a function's
	// entry and return (lat_fn), timed per thread; cpu-ns/pair is the
	// fixture's CPU time per pair of hits.
	benchLatency(b)
}

// benchTraceCount runs probekit trace --count -i 1 on a fixture, with
// extra arguments, waits for a printed count to show it attached, and
// checks the final count: every hit (counted) or none.
func benchTraceCount(b *testing.B, fixture string, counted bool, extra ...string) {
	benchTraceCountProbe(b, fixture, fixture+":sample:loop", counted, extra...)
}

// benchTraceCountProbe is benchTraceCount on probe, which the fixture's
// loop command hits.
func benchTraceCountProbe(b *testing.B, fixture, probe string, counted bool, extra ...string) {
	p := testkit.Start(b, fixture)
	pr, pw, err := os.Pipe()
	if err != nil {
		b.Fatal(err)
	}
	defer pr.Close()
	var last atomic.Uint64
	var printed atomic.Bool
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			var c countLine
			if json.Unmarshal(sc.Bytes(), &c) == nil {
				last.Store(c.Count)
				printed.Store(true)
			}
		}
	}()
	done := make(chan traceResult, 1)
	go func() {
		var errOut bytes.Buffer
		args := append([]string{"trace", "--json", "--count", "-i", "1", "-p", itoa(p.PID())}, extra...)
		code := run(append(args, probe), pw, &errOut)
		pw.Close()
		done <- traceResult{code: code, errOut: errOut.String()}
	}()
	warm := uint64(0)
	for deadline := time.Now().Add(30 * time.Second); counted && last.Load() == 0 || !counted && !printed.Load(); {
		if time.Now().After(deadline) {
			b.Fatal("no count printed within 30s")
		}
		if err := p.Loop("loop", 1); err != nil {
			b.Fatal(err)
		}
		warm++
		time.Sleep(50 * time.Millisecond)
	}
	b.ResetTimer()
	loopCPU(b, p)
	b.StopTimer()
	p.Stop()
	r := <-done
	<-read
	if r.code != 0 {
		b.Fatalf("exit %d: %s", r.code, r.errOut)
	}
	if !counted {
		if n := last.Load(); n != 0 {
			b.Fatalf("counted %d, want none", n)
		}
		return
	}
	// The warm-up hits before the attach are not counted.
	if n := last.Load(); n < uint64(b.N) || n > uint64(b.N)+warm {
		b.Fatalf("counted %d, want %d and at most %d warm-up hits", n, b.N, warm)
	}
}
