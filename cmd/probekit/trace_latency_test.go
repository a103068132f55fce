package main

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/record"
)

// latLine is a --latency --json histogram: per start probe, or per key.
type latLine struct {
	histLine
	End string                     `json:"end"`
	Key map[string]json.RawMessage `json:"key"`
}

// recHist is testdata/latency's lat_rec(3) over n rounds: level d lasts
// 1.125 * 2^(23+d) ns, in bucket Bucket(2^(23+d)); levels from lo on.
func recHist(n uint64, lo int) record.Histogram {
	var h record.Histogram
	for d := lo; d < 4; d++ {
		h[record.Bucket(1<<(23+d))] = n
	}
	return h
}

func histSum(h record.Histogram) uint64 {
	var n uint64
	for _, c := range h {
		n += c
	}
	return n
}

// TestTraceLatencyFunc: --latency uprobe:FUNC times the recursive lat_rec
// from each level's entry to its own return: 3 rounds, 3 in each level's
// bucket. 40-deep lat_deep: 32 levels a round timed, 8 reported too deep.
func TestTraceLatencyFunc(t *testing.T) {
	testkit.RequireKernel(t)
	requireAMD64(t)
	fx := testkit.Fixture("latency")
	got := aggregateJSON[latLine](t, "--latency", "uprobe:"+fx+":lat_rec", "--", fx, "--loop", "rec", "3")
	if len(got) != 1 || got[0].Probe != "uprobe:lat_rec" || got[0].End != "return" || histOf(t, got[0].histLine) != recHist(3, 0) {
		t.Errorf("lat_rec: %+v, want %v", got, recHist(3, 0))
	}
	r := runTraceCmd("--json", "--latency", "uprobe:"+fx+":lat_deep", "--", fx, "--loop", "deep", "2")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.errOut)
	}
	var l latLine
	if err := json.Unmarshal([]byte(strings.TrimSpace(r.out)), &l); err != nil {
		t.Fatalf("%q: %v", r.out, err)
	}
	if n := histSum(histOf(t, l.histLine)); n != 2*record.MaxLatencyDepth {
		t.Errorf("lat_deep: %d timed, want %d", n, 2*record.MaxLatencyDepth)
	}
	if want := "16 starts not timed: nested deeper than 32 on their thread"; !strings.Contains(r.errOut, want) {
		t.Errorf("stderr %q, want %q", r.errOut, want)
	}
}

// TestTraceLatencyUSDT: --latency START END on lat:start and lat:done,
// nested 4 deep: each level is timed from its own start; as a launched
// command, with "*" targets under -f, and with -p. Orphan ends are
// reported.
func TestTraceLatencyUSDT(t *testing.T) {
	testkit.RequireKernel(t)
	requireAMD64(t)
	fx := testkit.Fixture("latency")
	for _, probes := range [][]string{{fx + ":lat:start", fx + ":lat:done"}, {"-f", "*:lat:start", "*:lat:done"}} {
		args := append(append([]string{"--latency"}, probes...), "--", fx, "--loop", "rec", "2")
		got := aggregateJSON[latLine](t, args...)
		if len(got) != 1 || got[0].Probe != "lat:start" || got[0].End != "lat:done" || histOf(t, got[0].histLine) != recHist(2, 0) {
			t.Errorf("%v: %+v, want %v", probes, got, recHist(2, 0))
		}
	}
	// -p: a running process, traced until it exits.
	p := testkit.Start(t, fx)
	finish := traceLatencyPID(t, p, fx+":lat:start", fx+":lat:done")
	if err := p.Loop("rec", 2); err != nil {
		t.Fatal(err)
	}
	if l := finish(); l.Probe != "lat:start" || histOf(t, l.histLine) != recHist(2, 0) {
		t.Errorf("-p: %+v, want %v", l, recHist(2, 0))
	}
	r := runTraceCmd("--latency", fx+":lat:start", fx+":lat:done", "--", fx, "--loop", "orphan", "5")
	if want := "5 ends without a start on their thread"; r.code != 0 || !strings.Contains(r.errOut, want) {
		t.Errorf("orphans: exit %d, stderr %q, want %q", r.code, r.errOut, want)
	}
	if !strings.Contains(r.out, "lat:start -> lat:done (ns)\n(no hits)\n") {
		t.Errorf("orphans: output %q", r.out)
	}
}

// TestTraceLatencyByFilter: keys and the filter are read at the start:
// by the level (arg1) and the start's function, levels 0 and 1 filtered
// out, which still end their own starts (else level 2 would be timed
// from level 1's start). The text form prints a histogram per key.
func TestTraceLatencyByFilter(t *testing.T) {
	testkit.RequireKernel(t)
	requireAMD64(t)
	fx := testkit.Fixture("latency")
	for _, probes := range [][]string{{fx + ":lat:start", fx + ":lat:done"}, {"uprobe:" + fx + ":lat_rec"}} {
		args := append(append([]string{"--latency", "--by", "arg1,func", "--filter", "arg1 >= 2 && comm == \"latency\""}, probes...), "--", fx, "--loop", "rec", "2")
		got := aggregateJSON[latLine](t, args...)
		if len(got) != 2 {
			t.Fatalf("%v: %+v, want 2 keys", probes, got)
		}
		fn := `"lat_rec"`
		if len(probes) == 2 {
			fn = `"start"`
		}
		for _, l := range got {
			d, err := strconv.Atoi(string(l.Key["arg1"]))
			var want record.Histogram
			want[record.Bucket(1<<(23+d))] = 2
			if err != nil || d < 2 || string(l.Key["func"]) != fn || histOf(t, l.histLine) != want {
				t.Errorf("%v: key %s: %+v, want level 2 or 3 of %s in one bucket, 2 hits", probes, l.Key, l.Buckets, fn)
			}
		}
	}
	r := runTraceCmd("--latency", "--by", "arg1", "--top", "1", fx+":lat:start", fx+":lat:done", "--", fx, "--loop", "rec", "1")
	if r.code != 0 || !strings.HasPrefix(r.out, "arg1=") || strings.Count(r.out, "arg1=") != 1 {
		t.Errorf("--top 1: exit %d, output %q, stderr %s", r.code, r.out, r.errOut)
	}
}

// TestTraceLatencyPostgres: PostgreSQL 15's query__start and query__done
// time each query of backends forked after the trace started (-f -p
// postmaster), keyed by the query text: pg_sleep(0.02) three times in
// [16M, 32M) ns, pg_sleep(0.05) twice in [32M, 64M).
func TestTraceLatencyPostgres(t *testing.T) {
	testkit.RequireKernel(t)
	c := startPostgres(t)
	pm := c.postmaster
	// Backends inherit the postmaster's policy: a FIFO backend wakes from
	// pg_sleep on time on a loaded machine.
	if err := unix.SchedSetAttr(pm.Process.Pid, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: 10}, 0); err != nil {
		t.Fatalf("SCHED_FIFO for the postmaster: %v", err)
	}
	pg := postgresBin + "/postgres:postgresql:"
	queries := map[string]struct {
		n      uint64
		bucket int
	}{"select pg_sleep(0.02)": {3, record.Bucket(1 << 24)}, "select pg_sleep(0.05)": {2, record.Bucket(1 << 25)}}
	out, errOut := c.trace(t, func(*testkit.Buffer) {
		for q, w := range queries {
			for range w.n {
				if err := c.psql(q); err != nil {
					t.Fatal(err)
				}
			}
		}
	}, "--latency", "--by", "str1", pg+"query__start", pg+"query__done")
	seen := 0
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if !strings.HasPrefix(line, `{"key":`) {
			continue
		}
		var l latLine
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		var q string
		if err := json.Unmarshal(l.Key["str1"], &q); err != nil {
			t.Fatal(err)
		}
		w, ok := queries[q]
		if !ok {
			continue // the cluster's own queries
		}
		seen++
		// Every query in its sleep's bucket; with -short (emulated
		// kernels, where a 20 ms sleep was seen to last 35 ms) in it or
		// the next one up. Never below: that would be a wrong pairing.
		slack := 0
		if testing.Short() {
			slack = 1
		}
		got := histOf(t, l.histLine)
		var n uint64
		for b := w.bucket; b <= w.bucket+slack && b < len(got); b++ {
			n += got[b]
		}
		var all uint64
		for _, c := range got {
			all += c
		}
		if n != w.n || all != w.n {
			t.Errorf("%q: %+v, want %d in bucket %d (+%d)", q, l.Buckets, w.n, w.bucket, slack)
		}
	}
	if seen != len(queries) {
		t.Errorf("%d of the %d queries seen:\n%s\n%s", seen, len(queries), out, errOut)
	}
}

// Bad uses of --latency: one line each, saying what is wrong.
func TestTraceLatencyUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--latency", "--count", "uprobe:x:f"}, "--latency, --count and --hist exclude each other"},
		{[]string{"--latency", "--hist", "1", "uprobe:x:f"}, "--latency, --count and --hist exclude each other"},
		{[]string{"--latency", "x:p:start"}, "a USDT probe has no return: give two, --latency START END"},
		{[]string{"--latency", "uretprobe:x:f"}, "give uprobe:TARGET:FUNC"},
		{[]string{"--latency", "x:p:a", "x:p:b", "x:p:c"}, "one function probe (uprobe:TARGET:FUNC) or two probes (START END), not 3"},
		{[]string{"--latency", "x:p:a", "x:p:a"}, "START and END are the same probe"},
		{[]string{"--latency", "--by", "ret", "uprobe:x:f"}, "--latency reads them at the start, uprobe:f"},
		{[]string{"--latency", "--filter", "ret > 0", "uprobe:x:f"}, "--latency reads them at the start, uprobe:f"},
		{[]string{"--latency", "-n", "3", "uprobe:x:f"}, "--count, --hist and --latency print none"},
		{[]string{"--latency", "--stack", "uprobe:x:f"}, "(--latency) has no stacks"},
	} {
		_, err := parseTrace(c.args)
		var ue *usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%v: %v, want a one-line usage error with %q", c.args, err, c.want)
		}
	}
	req, err := parseTrace([]string{"--latency", "--by", "arg1", "--filter", "arg2 > 3", "uprobe:x:f"})
	if err != nil || req.Mode != record.ModeLatency || len(req.Probes) != 2 || req.LatencyEnd != 1 || req.Probes[1].Kind != record.KindUretprobe || req.Probes[1].Func != "f" {
		t.Errorf("--latency uprobe:x:f: %+v, %v; want the entry then the return", req, err)
	}
	req, err = parseTrace([]string{"--latency", "--filter", "ret > 3", "uretprobe:x:f", "x:p:b"})
	if err != nil || len(req.Probes) != 2 || req.LatencyEnd != 1 {
		t.Errorf("a uretprobe START with a ret filter: %+v, %v", req, err)
	}
}

// TestTraceLatencyGo: on Go, a function's end is each of its return
// instructions (a uretprobe would crash the program), and calls pair per
// goroutine (record.LatencyGoroutine): classify, with four return paths,
// is timed once per call, and recursion 20 deep (frames of 1 KiB, so the
// goroutine stack is copied) once per level. Paired per thread, 5 runs
// of 6 lost 1 to 12 calls to goroutines that moved to another thread.
func TestTraceLatencyGo(t *testing.T) {
	testkit.RequireKernel(t)
	requireAMD64(t)
	fx := testkit.Fixture("goprog")
	for _, c := range []struct {
		fn, command string
		want        uint64
	}{{"main.classify", "classify 100", 100}, {"main.recurse", "recurse 20 5", 21 * 5}} {
		p := testkit.Start(t, fx)
		finish := traceLatencyPID(t, p, "uprobe:"+fx+":"+c.fn)
		p.Do(c.command)
		l := finish()
		if n := histSum(histOf(t, l.histLine)); l.Probe != "uprobe:"+c.fn || l.End != "return" || n != c.want {
			t.Errorf("%s: %+v: %d timed, want %d", c.command, l, n, c.want)
		}
	}
}
