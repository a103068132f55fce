package record_test

import (
	"os"
	"runtime"
	"testing"

	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/record"
	"github.com/probekit/probekit/usdt"
)

// latencyMatchRun loads ModeLatency keyed by the start's argument 0 and
// probe, with SetLatencyMatch(match...) unless match is nil, attaches
// START and END (testdata/latency's lat probes, either way round) and
// fires probe rounds times.
func latencyMatchRun(t *testing.T, match []int, start, end, probe string, rounds int) ([]record.KeyedHistogram, record.LatencyLost) {
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
	if err := record.SetKeys(spec, []record.KeyPart{{Kind: record.KeyArg, Val: 0}, {Kind: record.KeyProbe}}); err != nil {
		t.Fatal(err)
	}
	if match != nil {
		if err := record.SetLatencyMatch(spec, match...); err != nil {
			t.Fatal(err)
		}
	}
	objs, err := record.LoadSpec(spec, record.USDTProgram)
	if err != nil {
		t.Fatal(err)
	}
	defer objs.Close()
	fx := testkit.Fixture("latency")
	p := testkit.Start(t, fx)
	att, err := usdt.NewAttacherWithMaps(spec, objs.Specs, objs.IPToSpecID)
	if err != nil {
		t.Fatal(err)
	}
	for _, pr := range []struct {
		name   string
		cookie uint64
	}{{start, 5}, {end, 6 | record.LatencyEnd}} {
		l, err := att.Attach(objs.Program, fx, "lat", pr.name, &usdt.Options{PID: p.PID(), Cookie: pr.cookie})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
	}
	if err := p.Loop(probe, rounds); err != nil {
		t.Fatal(err)
	}
	got, err := objs.KeyedHistograms()
	if err != nil {
		t.Fatal(err)
	}
	return got, lost(t, objs)
}

// SetLatencyMatch: an end closes only an open start whose identity
// arguments equal its own.
//
// Nested: lat_rec's levels, start(d) ... done(d) matched by argument 0,
// are each timed from their own start, none below its bucket.
//
// Mismatched: with the roles swapped (lat:done the start, lat:start the
// end), "pair" fires start(r) then done(r) per round r: each end's
// identity r is that of no open start (those are 0 to r-1), so every end
// is counted as one without a start and nothing is timed. Without the
// match each end closes the previous round's start: rounds - 1 timed,
// the wrong pairing CPython's sys.setprofile callback made.
func TestLatencyMatch(t *testing.T) {
	testkit.RequireKernel(t)
	if runtime.GOARCH != "amd64" {
		t.Skip("the fixture is built for x86-64")
	}
	t.Run("nested", func(t *testing.T) {
		const rounds = 2
		got, l := latencyMatchRun(t, []int{0}, "start", "done", "rec", rounds)
		checkLevels(t, got, 0, rounds, 5)
		if l != (record.LatencyLost{}) {
			t.Errorf("lost %+v, want none", l)
		}
	})
	const rounds = 5
	t.Run("mismatched", func(t *testing.T) {
		got, l := latencyMatchRun(t, []int{0}, "done", "start", "pair", rounds)
		if len(got) != 0 {
			t.Errorf("timed %+v, want nothing", got)
		}
		if l != (record.LatencyLost{NoStart: rounds}) {
			t.Errorf("lost %+v, want %d ends without a start", l, rounds)
		}
	})
	t.Run("unmatched", func(t *testing.T) {
		got, l := latencyMatchRun(t, nil, "done", "start", "pair", rounds)
		var n uint64
		for _, kh := range got {
			for _, c := range kh.Hist {
				n += c
			}
		}
		if n != rounds-1 || l != (record.LatencyLost{NoStart: 1}) {
			t.Errorf("%d timed, lost %+v; want %d timed, 1 end without a start", n, l, rounds-1)
		}
	})
}
