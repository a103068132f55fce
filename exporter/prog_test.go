package exporter

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"unsafe"

	"github.com/probekit/probekit/probe"
)

// TestLayout: the Go types read from the maps are export.c's structs.
func TestLayout(t *testing.T) {
	spec, err := loadExport()
	if err != nil {
		t.Fatal(err)
	}
	m := spec.Maps["series"]
	if m.KeySize != uint32(unsafe.Sizeof(seriesKey{})) || m.ValueSize != uint32(unsafe.Sizeof(seriesValue{})) {
		t.Errorf("series: key %d value %d bytes, Go %d and %d", m.KeySize, m.ValueSize, unsafe.Sizeof(seriesKey{}), unsafe.Sizeof(seriesValue{}))
	}
	if m.KeySize != SeriesKeyBytes || m.ValueSize != SeriesValueBytes {
		t.Errorf("series: key %d value %d bytes, SeriesKeyBytes %d and SeriesValueBytes %d", m.KeySize, m.ValueSize, SeriesKeyBytes, SeriesValueBytes)
	}
	if v := spec.Maps["errors"].MaxEntries; v != uint32(len(lostReasons)) {
		t.Errorf("errors: %d entries, %d reasons", v, len(lostReasons))
	}
	for name, size := range map[string]uintptr{"metrics": unsafe.Sizeof(metricShape{}), "sites": unsafe.Sizeof(siteTable{})} {
		if v := spec.Maps[name].ValueSize; v != uint32(size) {
			t.Errorf("%s: value %d bytes, Go %d", name, v, size)
		}
	}
}

func TestBoundOf(t *testing.T) {
	for _, c := range []struct {
		b       float64
		latency bool
		want    int64
	}{
		{10, false, 10},
		{50.5, false, 50},
		{-0.5, false, -1},
		{1e30, false, math.MaxInt64},
		{-1e30, false, math.MinInt64},
		{0.001, true, 1000000},
		{1e-6, true, 1000},
	} {
		if got := boundOf(c.b, c.latency); got != c.want {
			t.Errorf("boundOf(%v, %v) = %d, want %d", c.b, c.latency, got, c.want)
		}
	}
}

// TestAddSeries: per-CPU values add up; label values that meet (a string
// label "other" and the folded series) merge.
func TestAddSeries(t *testing.T) {
	m := &Metric{Labels: []Label{{Name: "f", Arg: probe.Arg(1), String: true}, {Name: "n", Arg: probe.Arg(2)}}}
	var k seriesKey
	copy(k.Str[:], "other\x00junk")
	k.Nums[1] = -7
	out := map[string]*series{}
	per := []seriesValue{{Count: 2, Sum: 5}, {Count: 1, Sum: -1}}
	per[0].Buckets[3] = 2
	per[1].Buckets[0] = 1
	if n := addSeries(out, labelValues(m, &k), per); n != 3 {
		t.Errorf("added %d, want 3", n)
	}
	k.Nums[1] = 0
	if got := labelValues(m, &k); got[0] != "other" || got[1] != "0" {
		t.Errorf("label values %q", got)
	}
	addSeries(out, []string{"other", "-7"}, []seriesValue{{Count: 4}})
	if n := addSeries(out, otherValues(m), []seriesValue{{}, {}}); n != 0 {
		t.Errorf("folded %d, want 0", n)
	}
	if len(out) != 1 {
		t.Fatalf("%d series, want 1 (an empty other is left out)", len(out))
	}
	for _, s := range out {
		if s.value.Count != 7 || s.value.Sum != 4 || s.value.Buckets[3] != 2 || s.value.Buckets[0] != 1 {
			t.Errorf("merged %+v", s.value)
		}
	}
}

func TestSame(t *testing.T) {
	a := &Metric{Name: "a", Type: Counter, Probe: &Probe{Target: "/bin/x", Provider: "p", Name: "n"}, Line: 3}
	b := *a
	b.Probe = &Probe{Target: "/bin/x", Provider: "p", Name: "n"}
	b.Line = 9
	if !same(a, &b) {
		t.Error("same metric on another line differs")
	}
	b.Probe.Name = "m"
	if same(a, &b) {
		t.Error("another probe is the same")
	}
}

// TestSeriesMemoryCeiling: a configuration whose max_series would take
// more kernel memory than MaxSeriesMemory is refused by Check, naming
// the metric and line that cross it and the ceiling; one just under it
// passes (issue 37 item 7).
func TestSeriesMemoryCeiling(t *testing.T) {
	per := SeriesKeyBytes + SeriesValueBytes*seriesCPUs()
	fits := MaxSeriesMemory / per
	var yaml strings.Builder
	yaml.WriteString("metrics:\n")
	left := fits
	for i := 0; left > 0; i++ {
		n := min(left, MaxMaxSeries)
		left -= n
		fmt.Fprintf(&yaml, "  - {name: m%d_total, type: counter, probe: /bin/x:p:n, max_series: %d, labels: {a: {arg: 1}}}\n", i, n)
	}
	if _, err := ParseConfig("fits.yaml", []byte(yaml.String()), ParseProbe); err != nil {
		t.Fatalf("%d series (%d bytes each) under the ceiling: %v", fits, per, err)
	}
	yaml.WriteString("  - {name: over_total, type: counter, probe: /bin/x:p:n, max_series: 1, labels: {a: {arg: 1}}}\n")
	_, err := ParseConfig("over.yaml", []byte(yaml.String()), ParseProbe)
	line := strings.Count(yaml.String(), "\n")
	want := fmt.Sprintf("over.yaml:%d: ", line)
	t.Log(err)
	if err == nil || !strings.HasPrefix(err.Error(), want+fmt.Sprintf("metrics[%d].max_series: ", line-2)) || !strings.Contains(err.Error(), "above the ceiling of 256 MiB") {
		t.Errorf("one series over the ceiling: %v; want %q... naming the ceiling", err, want)
	}
}
