package record_test

import (
	"os"
	"runtime"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/probekit/probekit/internal/features"
	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/record"
	"github.com/probekit/probekit/uprobe"
	"github.com/probekit/probekit/usdt"
)

// recLevels is testdata/latency.c's lat_rec(3): 4 levels, level d lasting
// 1.125 * 2^(23+d) ns at least, in bucket Bucket(2^(23+d)) when its
// sleeps wake on time.
const recLevels = 4

func recBucket(d int) int { return record.Bucket(1 << (23 + d)) }

// checkLevels checks the histograms of lat_rec's levels, keyed by level
// (the start's first argument), from level lo on: n hits each, none
// below the level's bucket. A level timed from another level's start
// (a wrong pairing) is shorter by half or more, below its bucket. Late
// wakeups can move a level to a higher bucket: under the kernel matrix's
// emulation on a loaded host they did, by up to 59 ms, so the test does
// not hold levels to their bucket from above (cmd/probekit's tests, on
// the host, do).
func checkLevels(t *testing.T, got []record.KeyedHistogram, lo int, n uint64, probe uint32) {
	t.Helper()
	if len(got) != recLevels-lo {
		t.Fatalf("%d keys %+v, want levels %d to %d", len(got), got, lo, recLevels-1)
	}
	for _, kh := range got {
		d := int(kh.Key.Nums[0])
		var below, all uint64
		for b, c := range kh.Hist {
			all += c
			if b < recBucket(d) {
				below += c
			}
		}
		if d < lo || d >= recLevels || kh.Key.Probe != probe || all != n || below != 0 {
			t.Errorf("key %+v: %v; want level %d to %d of probe %d, %d hits from bucket %d up", kh.Key, kh.Hist, lo, recLevels-1, probe, n, recBucket(d))
		}
	}
}

// loadLatency loads the record programs in ModeLatency with keys and a
// filter, as a Go program would.
func loadLatency(t *testing.T, which record.Programs, keys []record.KeyPart, filter []record.FilterTerm) (*ebpf.CollectionSpec, *record.Objects) {
	t.Helper()
	spec, err := record.Spec()
	if err != nil {
		t.Fatal(err)
	}
	if err := usdt.Prepare(spec); err != nil {
		t.Fatal(err)
	}
	if err := record.SetRingSize(spec, os.Getpagesize(), os.Getpagesize()); err != nil {
		t.Fatal(err)
	}
	if err := record.SetMode(spec, record.ModeLatency, 0); err != nil {
		t.Fatal(err)
	}
	if keys != nil {
		if err := record.SetKeys(spec, keys); err != nil {
			t.Fatal(err)
		}
	}
	if filter != nil {
		if err := record.SetFilter(spec, filter); err != nil {
			t.Fatal(err)
		}
	}
	objs, err := record.LoadSpec(spec, which)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { objs.Close() })
	return spec, objs
}

func lost(t *testing.T, objs *record.Objects) record.LatencyLost {
	t.Helper()
	l, err := objs.LatencyLost()
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestLatencyFunc: the entry (a start) and the uretprobe (an end,
// LatencyEnd) of a function time it per call. The 40-deep recursion of
// lat_deep (no sleep) times its 32 outer levels and counts 8 as too
// deep; the recursive lat_rec is timed per level from its own entry to
// its own return: 3 rounds put 3 hits in each level, none below its
// bucket, under the entry's probe index (keyed by level and probe; the
// unkeyed histograms are cmd/probekit's TestTraceLatencyFunc's).
func TestLatencyFunc(t *testing.T) {
	testkit.RequireKernel(t)
	if runtime.GOARCH != "amd64" {
		t.Skip("the fixture is built for x86-64")
	}
	ok, err := features.Have(features.Cookie)
	testkit.NeedFeature(t, ok, err, features.Cookie.Since(), features.Cookie.String())
	_, objs := loadLatency(t, record.FuncProgram, []record.KeyPart{{Kind: record.KeyArg, Val: 0}, {Kind: record.KeyProbe}}, nil)
	fx := testkit.Fixture("latency")
	p := testkit.Start(t, fx)
	bin, err := uprobe.Open(fx)
	if err != nil {
		t.Fatal(err)
	}
	defer bin.Close()
	for i, fn := range []string{"lat_rec", "lat_deep"} {
		start, err := record.FuncCookie(uint32(2*i), record.RegsC, record.KindUprobe, 0)
		if err != nil {
			t.Fatal(err)
		}
		end, err := record.FuncCookie(uint32(2*i+1), record.RegsRet, record.KindUretprobe, 0)
		if err != nil {
			t.Fatal(err)
		}
		l, err := bin.Entry(fn, objs.FuncProgram, &uprobe.Options{PID: p.PID(), Cookie: start})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		l, err = bin.Return(fn, objs.FuncProgram, &uprobe.Options{PID: p.PID(), Cookie: end | record.LatencyEnd})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
	}
	// lat_deep first: its 40 levels are also the process's first
	// uprobe and uretprobe hits, which under emulation (the kernel
	// matrix's qemu) took tens of milliseconds, enough to move a
	// level of lat_rec to another bucket.
	if err := p.Loop("deep", 1); err != nil {
		t.Fatal(err)
	}
	deep, err := objs.KeyedHistograms()
	if err != nil {
		t.Fatal(err)
	}
	// The 32 outer levels, 39 to 8, each once under the entry's probe.
	levels := map[int64]bool{}
	for _, kh := range deep {
		if kh.Key.Probe != 2 || kh.Key.Nums[0] < 40-record.MaxLatencyDepth || sum(kh.Hist) != 1 {
			t.Errorf("lat_deep: key %+v: %v; want an outer level of probe 2, once", kh.Key, kh.Hist)
		}
		levels[kh.Key.Nums[0]] = true
	}
	if len(levels) != record.MaxLatencyDepth {
		t.Errorf("lat_deep: %d levels timed, want %d", len(levels), record.MaxLatencyDepth)
	}
	if l := lost(t, objs); l != (record.LatencyLost{Deep: 40 - record.MaxLatencyDepth}) {
		t.Errorf("lost %+v, want %d too deep", l, 40-record.MaxLatencyDepth)
	}

	const rounds = 3
	if err := p.Loop("rec", rounds); err != nil {
		t.Fatal(err)
	}
	all, err := objs.KeyedHistograms()
	if err != nil {
		t.Fatal(err)
	}
	var rec []record.KeyedHistogram
	for _, kh := range all {
		if kh.Key.Probe != 2 {
			rec = append(rec, kh)
		}
	}
	checkLevels(t, rec, 0, rounds, 0)
	if l := lost(t, objs); l != (record.LatencyLost{Deep: 40 - record.MaxLatencyDepth}) {
		t.Errorf("lost %+v, want only lat_deep's %d too deep", l, 40-record.MaxLatencyDepth)
	}
}

func sum(h record.Histogram) uint64 {
	var n uint64
	for _, c := range h {
		n += c
	}
	return n
}

// TestLatencyUSDTKeyedFiltered: the USDT pair lat:start (a start) and
// lat:done (LatencyEnd) nested 4 deep, keyed by the start's argument (the
// level) and filtered at the start by arg0 >= 2: levels 2 and 3 are
// timed, each from its own bucket up, and the dropped levels 0 and 1
// still end their own starts (else level 2 would pair with level 1's
// end, 18.9 ms early, below its bucket). Three orphan ends count as ends without a start.
func TestLatencyUSDTKeyedFiltered(t *testing.T) {
	testkit.RequireKernel(t)
	if runtime.GOARCH != "amd64" {
		t.Skip("the fixture is built for x86-64")
	}
	spec, objs := loadLatency(t, record.USDTProgram, []record.KeyPart{{Kind: record.KeyArg, Val: 0}, {Kind: record.KeyProbe}},
		[]record.FilterTerm{{Field: record.FilterArg, Op: record.FilterGE, Val: 0, Num: 2}})
	fx := testkit.Fixture("latency")
	p := testkit.Start(t, fx)
	att, err := usdt.NewAttacherWithMaps(spec, objs.Specs, objs.IPToSpecID)
	if err != nil {
		t.Fatal(err)
	}
	for _, pr := range []struct {
		name   string
		cookie uint64
	}{{"start", 5}, {"done", 6 | record.LatencyEnd}} {
		l, err := att.Attach(objs.Program, fx, "lat", pr.name, &usdt.Options{PID: p.PID(), Cookie: pr.cookie})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
	}
	const rounds = 2
	if err := p.Loop("rec", rounds); err != nil {
		t.Fatal(err)
	}
	if err := p.Loop("orphan", 3); err != nil {
		t.Fatal(err)
	}
	got, err := objs.KeyedHistograms()
	if err != nil {
		t.Fatal(err)
	}
	checkLevels(t, got, 2, rounds, 5)
	if l := lost(t, objs); l != (record.LatencyLost{NoStart: 3}) {
		t.Errorf("lost %+v, want 3 ends without a start", l)
	}
}
