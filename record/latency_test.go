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
// 1.125 * 2^(23+d) ns, in bucket Bucket(2^(23+d)).
const recLevels = 4

func recBucket(d int) int { return record.Bucket(1 << (23 + d)) }

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
// its own return: 3 rounds put 3 hits in each level's bucket, under the
// entry's probe index.
func TestLatencyFunc(t *testing.T) {
	testkit.RequireKernel(t)
	if runtime.GOARCH != "amd64" {
		t.Skip("the fixture is built for x86-64")
	}
	ok, err := features.Have(features.Cookie)
	testkit.NeedFeature(t, ok, err, features.Cookie.Since(), features.Cookie.String())
	_, objs := loadLatency(t, record.FuncProgram, nil, nil)
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
	hists, err := objs.Histograms(4)
	if err != nil {
		t.Fatal(err)
	}
	if n := sum(hists[2]); n != record.MaxLatencyDepth || hists[3] != (record.Histogram{}) {
		t.Errorf("lat_deep: %d timed, want %d: %v; return %v, want none", n, record.MaxLatencyDepth, hists[2], hists[3])
	}
	if l := lost(t, objs); l != (record.LatencyLost{Deep: 40 - record.MaxLatencyDepth}) {
		t.Errorf("lost %+v, want %d too deep", l, 40-record.MaxLatencyDepth)
	}

	const rounds = 3
	if err := p.Loop("rec", rounds); err != nil {
		t.Fatal(err)
	}
	if hists, err = objs.Histograms(4); err != nil {
		t.Fatal(err)
	}
	var want record.Histogram
	for d := range recLevels {
		want[recBucket(d)] = rounds
	}
	if hists[0] != want || hists[1] != (record.Histogram{}) {
		t.Errorf("lat_rec: entry histogram %v, return %v; want %v and none", hists[0], hists[1], want)
	}
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
// timed, each in its own bucket, and the dropped levels 0 and 1 still end
// their own starts (else level 2 would pair with level 1's end, 25 ms
// early). Three orphan ends count as ends without a start.
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
	want := map[int64]record.Histogram{}
	for d := 2; d < recLevels; d++ {
		var h record.Histogram
		h[recBucket(d)] = rounds
		want[int64(d)] = h
	}
	if len(got) != len(want) {
		t.Fatalf("%d keys %+v, want %d", len(got), got, len(want))
	}
	for _, kh := range got {
		if kh.Key.Probe != 5 || kh.Hist != want[kh.Key.Nums[0]] {
			t.Errorf("key %+v: %v, want probe 5 and %v", kh.Key, kh.Hist, want[kh.Key.Nums[0]])
		}
	}
	if l := lost(t, objs); l != (record.LatencyLost{NoStart: 3}) {
		t.Errorf("lost %+v, want 3 ends without a start", l)
	}
}
