package exporter_test

import (
	"errors"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/probekit/probekit/exporter"
	"github.com/probekit/probekit/internal/features"
	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/probe"
	"github.com/probekit/probekit/record"
)

// privateFixture copies a fixture into the test's temporary directory, so
// that probes attached by path count this test's hits only.
func privateFixture(t *testing.T, name string) string {
	path := filepath.Join(t.TempDir(), name)
	testkit.CopyFile(t, testkit.Fixture(name), path)
	return path
}

// TestCollectorInOwnRegistry: an agent builds the exporter from a Go
// struct, registers it in its own registry, fires a probe and reads the
// exact values at a Gather.
func TestCollectorInOwnRegistry(t *testing.T) {
	testkit.RequireKernel(t)
	fixture := privateFixture(t, "usdt_sample")
	p := testkit.Start(t, fixture)
	loop := &probe.Spec{Kind: record.KindUSDT, Target: fixture, Provider: "sample", Name: "loop"}
	cfg := &exporter.Config{Metrics: []*exporter.Metric{
		{Name: "agent_loops_total", Help: "Loops.", Type: exporter.Counter, Probe: loop},
		{Name: "agent_loop_r1", Help: "r + 1.", Type: exporter.Histogram, Probe: loop, Value: probe.Arg(2), Buckets: []float64{5, 10}},
		{Name: "agent_loop_by_round_total", Help: "By round.", Type: exporter.Counter, Probe: loop, MaxSeries: 2,
			Labels: []exporter.Label{{Name: "round", Arg: probe.Arg(1)}}},
	}}
	if err := cfg.Check(); err != nil {
		t.Fatal(err)
	}
	x := exporter.New(exporter.Options{NoRuntimeMetrics: true})
	defer x.Close()
	x.Apply(cfg)
	if got := x.Attached(); len(got) != 3 {
		t.Fatalf("attached %v, want 3 metrics", got)
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(x); err != nil {
		t.Fatal(err)
	}
	if err := p.Loop("loop", 20); err != nil {
		t.Fatal(err)
	}
	// Round r passes r, r + 1, -r, r: r + 1 runs 1..20.
	want := map[string]float64{
		`agent_loops_total`:                                        20,
		`agent_loop_r1_bucket{le="5"}`:                             5,
		`agent_loop_r1_bucket{le="10"}`:                            10,
		`agent_loop_r1_bucket{le="+Inf"}`:                          20,
		`agent_loop_r1_sum`:                                        210,
		`agent_loop_r1_count`:                                      20,
		`agent_loop_by_round_total{round="0"}`:                     1,
		`agent_loop_by_round_total{round="1"}`:                     1,
		`agent_loop_by_round_total{overflow="true",round="other"}`: 18,
	}
	got := gather(t, reg, "agent_")
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("gathered %d samples, want %d: %v", len(got), len(want), got)
	}
}

// gather returns the samples of reg whose names start with prefix, keyed
// as the text format writes them (labels sorted by name).
func gather(t *testing.T, reg prometheus.Gatherer, prefix string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	key := func(name string, labels []*dto.LabelPair, extra ...string) string {
		var l []string
		for _, p := range labels {
			l = append(l, fmt.Sprintf("%s=%q", p.GetName(), p.GetValue()))
		}
		l = append(l, extra...)
		slices.Sort(l)
		if len(l) == 0 {
			return name
		}
		return name + "{" + strings.Join(l, ",") + "}"
	}
	for _, mf := range mfs {
		name := mf.GetName()
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		for _, m := range mf.GetMetric() {
			switch {
			case m.Counter != nil:
				out[key(name, m.GetLabel())] = m.GetCounter().GetValue()
			case m.Gauge != nil:
				out[key(name, m.GetLabel())] = m.GetGauge().GetValue()
			case m.Histogram != nil:
				h := m.GetHistogram()
				for _, b := range h.GetBucket() {
					out[key(name+"_bucket", m.GetLabel(), fmt.Sprintf("le=%q", strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64)))] = float64(b.GetCumulativeCount())
				}
				out[key(name+"_bucket", m.GetLabel(), `le="+Inf"`)] = float64(h.GetSampleCount())
				out[key(name+"_sum", m.GetLabel())] = h.GetSampleSum()
				out[key(name+"_count", m.GetLabel())] = float64(h.GetSampleCount())
			}
		}
	}
	return out
}

// TestCheckStruct: a configuration built in Go is refused for what a file
// would be, and gets a file's defaults.
func TestCheckStruct(t *testing.T) {
	loop := &probe.Spec{Kind: record.KindUSDT, Target: "/bin/x", Provider: "p", Name: "n"}
	ret := &probe.Spec{Kind: record.KindUretprobe, Target: "/bin/x", Func: "f"}
	for _, c := range []struct {
		m    exporter.Metric
		want string
	}{
		{exporter.Metric{Name: "9a", Type: exporter.Counter, Probe: loop}, "not a Prometheus metric name"},
		{exporter.Metric{Name: "a", Type: "gauge", Probe: loop}, "want counter or histogram"},
		{exporter.Metric{Name: "a", Type: exporter.Counter}, "no probe"},
		{exporter.Metric{Name: "a", Type: exporter.Histogram, Probe: loop, Value: probe.Arg(13)}, "value arg 13: want probe.Arg(1) to probe.Arg(12), numbered from 1"},
		{exporter.Metric{Name: "a", Type: exporter.Histogram, Probe: ret, Value: probe.Arg(1)}, "a uretprobe has only its return value"},
		{exporter.Metric{Name: "a", Type: exporter.Histogram, Probe: loop, End: loop, Buckets: []float64{0}}, "a latency bound is a positive"},
		{exporter.Metric{Name: "a", Type: exporter.Histogram, Probe: loop, Value: probe.Arg(1), Buckets: []float64{2, 1}}, "increasing order"},
		{exporter.Metric{Name: "a", Type: exporter.Histogram, Probe: loop}, "value: a histogram counts an argument"},
		{exporter.Metric{Name: "a", Type: exporter.Histogram, Probe: loop, Value: probe.Arg(0)}, "value arg 0: want probe.Arg(1)"},
		{exporter.Metric{Name: "a", Type: exporter.Counter, Probe: loop, Labels: []exporter.Label{{Name: "x", Arg: probe.Arg(0)}}}, "labels[0]: arg 0: want probe.Arg(1)"},
		{exporter.Metric{Name: "a", Type: exporter.Counter, Probe: loop, Labels: []exporter.Label{{Name: "x"}}}, "labels[0]: no argument"},
		{exporter.Metric{Name: "a", Type: exporter.Counter, Probe: loop, Labels: []exporter.Label{{Name: "overflow"}}}, "not a label name"},
		{exporter.Metric{Name: "go_a", Type: exporter.Counter, Probe: loop}, "names starting with go_"},
	} {
		m := c.m
		err := (&exporter.Config{Metrics: []*exporter.Metric{&m}}).Check()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.m, err, c.want)
		}
	}
	m := &exporter.Metric{Name: "a", Type: exporter.Histogram, Probe: loop, End: loop}
	c := &exporter.Config{Metrics: []*exporter.Metric{m, {Name: "a_count", Type: exporter.Counter, Probe: loop}}}
	if err := c.Check(); err == nil || !strings.Contains(err.Error(), `"a_count" writes samples named a_count, as "a" does`) {
		t.Errorf("a_count beside histogram a: %v", err)
	}
	c.Metrics = c.Metrics[:1]
	if err := c.Check(); err != nil {
		t.Fatal(err)
	}
	if !m.Value.IsZero() || m.MaxSeries != exporter.DefaultMaxSeries || len(m.Buckets) == 0 || m.ProbeText != "/bin/x:p:n" {
		t.Errorf("defaults: %+v", m)
	}
}

// start applies cfg (checked) to an Exporter registered in a registry of
// the test's own.
func start(t *testing.T, cfg *exporter.Config) (*exporter.Exporter, *prometheus.Registry) {
	t.Helper()
	if err := cfg.Check(); err != nil {
		t.Fatal(err)
	}
	x := exporter.New(exporter.Options{NoRuntimeMetrics: true, Log: log.New(testWriter{t}, "", 0)})
	t.Cleanup(func() { x.Close() })
	x.Apply(cfg)
	if got := x.Attached(); len(got) != len(cfg.Metrics) {
		t.Fatalf("attached %v, want %d metrics", got, len(cfg.Metrics))
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(x); err != nil {
		t.Fatal(err)
	}
	return x, reg
}

// testWriter writes to the test's log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(b), "\n"))
	return len(b), nil
}

// TestSeriesEviction: series idle for series_idle leave the map at a
// scrape, are counted, and their places go to new label values instead of
// the overflow series.
func TestSeriesEviction(t *testing.T) {
	testkit.RequireKernel(t)
	fixture := privateFixture(t, "usdt_sample")
	p := testkit.Start(t, fixture)
	loop := &probe.Spec{Kind: record.KindUSDT, Target: fixture, Provider: "sample", Name: "loop"}
	const idle = 500 * time.Millisecond
	_, reg := start(t, &exporter.Config{Metrics: []*exporter.Metric{
		{Name: "ev_total", Type: exporter.Counter, Probe: loop, MaxSeries: 2, SeriesIdle: idle,
			Labels: []exporter.Label{{Name: "neg", Arg: probe.Arg(3)}}},
		{Name: "kept_total", Type: exporter.Counter, Probe: loop, MaxSeries: 2, SeriesIdle: -1,
			Labels: []exporter.Label{{Name: "neg", Arg: probe.Arg(3)}}},
	}})
	// Rounds 0 and 1 pass -0 and -1 as argument 3.
	if err := p.Loop("loop", 2); err != nil {
		t.Fatal(err)
	}
	got := gather(t, reg, "")
	// The series were seen at that gather, before now.
	first := time.Now()
	for _, k := range []string{`ev_total{neg="0"}`, `ev_total{neg="-1"}`, `kept_total{neg="0"}`} {
		if got[k] != 1 {
			t.Errorf("%s = %v, want 1", k, got[k])
		}
	}
	// Past series_idle without a hit, the next scrape evicts both.
	time.Sleep(time.Until(first.Add(idle + 100*time.Millisecond)))
	got = gather(t, reg, "")
	if n := got[`probekit_export_series_evicted_total{metric="ev_total"}`]; n != 2 {
		t.Errorf("evicted %v series, want 2", n)
	}
	if _, ok := got[`ev_total{neg="0"}`]; ok {
		t.Error(`ev_total{neg="0"} served after its eviction`)
	}
	if got[`kept_total{neg="-1"}`] != 1 || got[`probekit_export_series_evicted_total{metric="kept_total"}`] != 0 {
		t.Errorf("series_idle never: %v", got)
	}
	// Three rounds: 0, -1 and -2. The evicted metric has room for two of
	// them; the other folds. The kept one is still full of 0 and -1.
	if err := p.Loop("loop", 3); err != nil {
		t.Fatal(err)
	}
	got = gather(t, reg, "")
	want := map[string]float64{
		`ev_total{neg="0"}`:                       1,
		`ev_total{neg="-1"}`:                      1,
		`ev_total{overflow="true",neg="other"}`:   1,
		`kept_total{neg="0"}`:                     2,
		`kept_total{neg="-1"}`:                    2,
		`kept_total{overflow="true",neg="other"}`: 1,
	}
	for k, v := range want {
		k = sortedKey(k)
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
}

// sortedKey sorts the labels of a sample key as gather writes them.
func sortedKey(k string) string {
	name, labels, ok := strings.Cut(k, "{")
	if !ok {
		return k
	}
	l := strings.Split(strings.TrimSuffix(labels, "}"), ",")
	slices.Sort(l)
	return name + "{" + strings.Join(l, ",") + "}"
}

// TestPIDCommLabels: the pid and comm labels are the hitting process's.
func TestPIDCommLabels(t *testing.T) {
	testkit.RequireKernel(t)
	fixture := privateFixture(t, "usdt_sample")
	p := testkit.Start(t, fixture)
	loop := &probe.Spec{Kind: record.KindUSDT, Target: fixture, Provider: "sample", Name: "loop"}
	_, reg := start(t, &exporter.Config{Metrics: []*exporter.Metric{
		{Name: "by_proc_total", Type: exporter.Counter, Probe: loop,
			Labels: []exporter.Label{{Name: "pid", Source: exporter.LabelPID}, {Name: "comm", Source: exporter.LabelComm}, {Name: "r", Arg: probe.Arg(1)}}},
	}})
	if err := p.Loop("loop", 2); err != nil {
		t.Fatal(err)
	}
	got := gather(t, reg, "by_proc_total")
	for r := range 2 {
		k := fmt.Sprintf(`by_proc_total{comm="usdt_sample",pid="%d",r="%d"}`, p.PID(), r)
		if got[k] != 1 {
			t.Errorf("%s = %v, want 1 (got %v)", k, got[k], got)
		}
	}
	if len(got) != 2 {
		t.Errorf("%d series, want 2: %v", len(got), got)
	}
}

// TestLatencyRecursion: starts and ends pair per thread as a stack, so
// each level of a recursion is measured from its own start: nest(3)'s
// levels last 20, 40, 60 and 80 ms, one in each bucket. Recursion past
// MaxDepth is counted, and the levels within it still measured.
func TestLatencyRecursion(t *testing.T) {
	testkit.RequireKernel(t)
	fixture := privateFixture(t, "recurse")
	p := testkit.Start(t, fixture)
	enter := &probe.Spec{Kind: record.KindUSDT, Target: fixture, Provider: "recurse", Name: "enter"}
	leave := &probe.Spec{Kind: record.KindUSDT, Target: fixture, Provider: "recurse", Name: "leave"}
	_, reg := start(t, &exporter.Config{Metrics: []*exporter.Metric{
		{Name: "level_seconds", Type: exporter.Histogram, Probe: enter, End: leave,
			Buckets: []float64{0.025, 0.075, 0.125, 0.175, 0.225}},
	}})
	const rounds = 3
	if err := p.Loop("nest", rounds); err != nil {
		t.Fatal(err)
	}
	got := gather(t, reg, "")
	want := map[string]float64{
		`level_seconds_bucket{le="0.025"}`: 0,
		`level_seconds_bucket{le="0.075"}`: rounds,
		`level_seconds_bucket{le="0.125"}`: 2 * rounds,
		`level_seconds_bucket{le="0.175"}`: 3 * rounds,
		`level_seconds_bucket{le="0.225"}`: 4 * rounds,
		`level_seconds_count`:              4 * rounds,
		`probekit_export_lost_updates_total{metric="level_seconds",reason="end_without_start"}`: 0,
		`probekit_export_lost_updates_total{metric="level_seconds",reason="depth_overflow"}`:    0,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	// The levels' times add up to 500 ms a round.
	if s := got["level_seconds_sum"]; s < rounds*0.5 || s > rounds*0.5+0.3 {
		t.Errorf("level_seconds_sum = %v, want %v to %v", s, rounds*0.5, rounds*0.5+0.3)
	}
	// deep(69): 70 levels, MaxDepth of them measured, the rest counted.
	if err := p.Loop("deep", 1); err != nil {
		t.Fatal(err)
	}
	got = gather(t, reg, "")
	if n := got["level_seconds_count"]; n != 4*rounds+exporter.MaxDepth {
		t.Errorf("level_seconds_count = %v, want %d", n, 4*rounds+exporter.MaxDepth)
	}
	if n := got[`probekit_export_lost_updates_total{metric="level_seconds",reason="depth_overflow"}`]; n != 70-exporter.MaxDepth {
		t.Errorf("depth_overflow = %v, want %d", n, 70-exporter.MaxDepth)
	}
	if n := got[`probekit_export_lost_updates_total{metric="level_seconds",reason="end_without_start"}`]; n != 0 {
		t.Errorf("end_without_start = %v, want 0", n)
	}
	// Every start was ended: a new round still pairs.
	if err := p.Loop("nest", 1); err != nil {
		t.Fatal(err)
	}
	if n := gather(t, reg, "")[`level_seconds_bucket{le="0.075"}`]; n != rounds+1+exporter.MaxDepth {
		t.Errorf(`level_seconds_bucket{le="0.075"} = %v, want %d`, n, rounds+1+exporter.MaxDepth)
	}
}

// TestFuncProbeGlobTarget: function probes on a glob target attach to
// every matching file as its processes map it, a process started after
// the exporter or running before it; two metrics on the same function
// each count every hit and each show the site. Without BPF cookies the
// function metrics are refused, and the glob target's watch is checked
// with a USDT counter on the same function's probe (sample:loop).
func TestFuncProbeGlobTarget(t *testing.T) {
	testkit.RequireKernel(t)
	t.Run("started_after", func(t *testing.T) { testFuncProbeGlobTarget(t, false) })
	t.Run("running_before", func(t *testing.T) { testFuncProbeGlobTarget(t, true) })
}

func testFuncProbeGlobTarget(t *testing.T, before bool) {
	fixture := privateFixture(t, "usdt_sample")
	target := filepath.Join(filepath.Dir(fixture), "usdt_samp*")
	metrics := []*exporter.Metric{
		{Name: "glob_fire_loop_total", Type: exporter.Counter,
			Probe: &probe.Spec{Kind: record.KindUprobe, Target: target, Func: "fire_loop"}},
		{Name: "glob_fire_loop_seconds", Type: exporter.Histogram,
			Probe: &probe.Spec{Kind: record.KindUprobe, Target: target, Func: "fire_loop"},
			End:   &probe.Spec{Kind: record.KindUretprobe, Target: target, Func: "fire_loop"}},
	}
	// Both metrics use fire_loop's entry in the fixture: each shows the
	// site (the counter one, the latency its entry and its return).
	sites := map[string]float64{"glob_fire_loop_total": 1, "glob_fire_loop_seconds": 2}
	if !funcProbes(t) {
		funcRefused(t, metrics...)
		metrics = []*exporter.Metric{{Name: "glob_loop_total", Type: exporter.Counter,
			Probe: &probe.Spec{Kind: record.KindUSDT, Target: target, Provider: "sample", Name: "loop"}}}
		sites = map[string]float64{"glob_loop_total": 1}
	}
	var p *testkit.Process
	if before {
		p = testkit.Start(t, fixture)
	}
	_, reg := start(t, &exporter.Config{Metrics: metrics})
	if !before {
		p = testkit.Start(t, fixture)
	}
	// The count of metric m: a counter's value, a histogram's _count.
	count := func(m string) string {
		if strings.HasSuffix(m, "_seconds") {
			return m + "_count"
		}
		return m
	}
	counted := func(got map[string]float64) bool {
		for m := range sites {
			if got[count(m)] == 0 {
				return false
			}
		}
		return true
	}
	// The watches attach a few milliseconds after the process starts:
	// fire until every metric counts, then count 5 more rounds.
	var got map[string]float64
	for deadline := time.Now().Add(10 * time.Second); ; {
		if err := p.Loop("loop", 1); err != nil {
			t.Fatal(err)
		}
		if got = gather(t, reg, ""); counted(got) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not counting within 10 s: %v", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := p.Loop("loop", 5); err != nil {
		t.Fatal(err)
	}
	after := gather(t, reg, "")
	for m, want := range sites {
		k := count(m)
		if n := after[k] - got[k]; n != 5 {
			t.Errorf("%s counted %v of 5 rounds", k, n)
		}
		if n := after[fmt.Sprintf(`probekit_export_attach_errors_total{metric=%q}`, m)]; n != 0 {
			t.Errorf("%s: %v attach errors", m, n)
		}
		k = fmt.Sprintf(`probekit_export_metric_sites{file=%q,metric=%q}`, fixture, m)
		if after[k] != want {
			t.Errorf("%s = %v, want %v", k, after[k], want)
		}
	}
}

// TestFuncGlobSites: the exporter resolves a function glob as probekit
// trace does (uprobe.Binary.Resolve): on a binary where
// probe_plain_a_alias is another name of probe_plain_a, a counter over
// probe_plain* attaches one site per address and counts each call once;
// over probe_*, the function the kernel refuses (x86-64) is left out and
// the others still count.
func TestFuncGlobSites(t *testing.T) {
	testkit.RequireKernel(t)
	fixture := privateFixture(t, "lock_entry")
	metrics := []*exporter.Metric{
		{Name: "plain_calls_total", Type: exporter.Counter,
			Probe: &probe.Spec{Kind: record.KindUprobe, Target: fixture, Func: "probe_plain*"}},
		{Name: "any_calls_total", Type: exporter.Counter,
			Probe: &probe.Spec{Kind: record.KindUprobe, Target: fixture, Func: "probe_*"}},
	}
	if !funcProbes(t) {
		// Nothing of this test is without function probes.
		funcRefused(t, metrics...)
		return
	}
	_, reg := start(t, &exporter.Config{Metrics: metrics})
	// The kernel checks a site's instruction when it plants the
	// breakpoint in a mapping: a process that maps the file before the
	// exporter attached is not needed for path-wide probes, which are
	// planted at each later mmap, where a refused site fails silently.
	if out, err := exec.Command(fixture, "7").CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", fixture, err, out)
	}
	got := gather(t, reg, "")
	// 21 would mean the alias was probed as well: each call of
	// probe_plain_a counted twice.
	for name, want := range map[string]float64{"plain_calls_total": 14, "any_calls_total": 14} {
		if got[name] != want {
			t.Errorf("%s = %v, want %v (7 calls of each of two functions)", name, got[name], want)
		}
	}
}

// TestReloadGlobTarget: a metric added by a reload on the glob function
// target of a metric kept, while a process maps the file, is attached
// there too (its own watch): both show the site and count each hit; the
// kept one keeps its counts. Without BPF cookies, where function
// metrics are refused, the two count the USDT probe sample:loop of the
// same function.
func TestReloadGlobTarget(t *testing.T) {
	testkit.RequireKernel(t)
	fixture := privateFixture(t, "usdt_sample")
	target := filepath.Join(filepath.Dir(fixture), "usdt_samp*")
	pr := &probe.Spec{Kind: record.KindUprobe, Target: target, Func: "fire_loop"}
	if !funcProbes(t) {
		funcRefused(t, &exporter.Metric{Name: "a_total", Type: exporter.Counter, Probe: pr})
		pr = &probe.Spec{Kind: record.KindUSDT, Target: target, Provider: "sample", Name: "loop"}
	}
	p := testkit.Start(t, fixture)
	a := &exporter.Metric{Name: "a_total", Type: exporter.Counter, Probe: pr}
	b := &exporter.Metric{Name: "b_total", Type: exporter.Counter, Probe: pr}
	x, reg := start(t, &exporter.Config{Metrics: []*exporter.Metric{a}})
	if err := p.Loop("loop", 3); err != nil {
		t.Fatal(err)
	}
	cfg := &exporter.Config{Metrics: []*exporter.Metric{a, b}}
	if err := cfg.Check(); err != nil {
		t.Fatal(err)
	}
	x.Apply(cfg)
	if got := x.Attached(); len(got) != 2 {
		t.Fatalf("attached %v after the reload, want 2 metrics", got)
	}
	if err := p.Loop("loop", 5); err != nil {
		t.Fatal(err)
	}
	got := gather(t, reg, "")
	for k, want := range map[string]float64{
		"a_total": 8,
		"b_total": 5,
		fmt.Sprintf(`probekit_export_metric_sites{file=%q,metric="a_total"}`, fixture): 1,
		fmt.Sprintf(`probekit_export_metric_sites{file=%q,metric="b_total"}`, fixture): 1,
	} {
		if got[k] != want {
			t.Errorf("%s = %v, want %v", k, got[k], want)
		}
	}
}

// TestFuncSitesShareLink: counters on two functions of one file share one
// attachment (a uprobe_multi link: as many descriptors as one counter
// takes), each counts its own function's calls exactly and shows its own
// site, and the attachment is released with them.
func TestFuncSitesShareLink(t *testing.T) {
	testkit.RequireKernel(t)
	have, err := features.Have(features.UprobeMulti)
	testkit.NeedFeature(t, have, err, features.UprobeMulti.Since(), "uprobe_multi")
	fixture := privateFixture(t, "func_args")
	counter := func(name, fn string) *exporter.Metric {
		return &exporter.Metric{Name: name, Type: exporter.Counter, Probe: &probe.Spec{Kind: record.KindUprobe, Target: fixture, Func: fn}}
	}
	held := func(ms ...*exporter.Metric) int {
		before := openFDs(t)
		x, _ := start(t, &exporter.Config{Metrics: ms})
		n := openFDs(t) - before
		x.Close()
		return n
	}
	one, two := held(counter("sum6_total", "sum6")), held(counter("sum6_total", "sum6"), counter("count_char_total", "count_char"))
	if one != two {
		t.Errorf("one counter holds %d descriptors, two on two functions %d: want the same (one link)", one, two)
	}
	sum6 := counter("sum6_total", "sum6")
	x, reg := start(t, &exporter.Config{Metrics: []*exporter.Metric{sum6, counter("count_char_total", "count_char")}})
	run := func() {
		if out, err := exec.Command(fixture, "3").CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", fixture, err, out)
		}
	}
	run()
	got := gather(t, reg, "")
	for k, want := range map[string]float64{
		"sum6_total": 3, "count_char_total": 3,
		fmt.Sprintf(`probekit_export_metric_sites{file=%q,metric="sum6_total"}`, fixture):       1,
		fmt.Sprintf(`probekit_export_metric_sites{file=%q,metric="count_char_total"}`, fixture): 1,
	} {
		if got[k] != want {
			t.Errorf("%s = %v, want %v", k, got[k], want)
		}
	}
	// A reload that drops one keeps the link for the other.
	x.Apply(&exporter.Config{Metrics: []*exporter.Metric{sum6}})
	run()
	got = gather(t, reg, "")
	if got["sum6_total"] != 6 {
		t.Errorf("sum6_total = %v after the reload, want 6", got["sum6_total"])
	}
	if _, ok := got["count_char_total"]; ok {
		t.Error("count_char_total served after the reload dropped it")
	}
}

// openFDs is the number of open descriptors of the test process.
func openFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestCheckErrorsNameMetric: the errors of a Config built in Go name the
// metric by its name and index, never "line 0", and never start with an
// empty path (issue 40).
func TestCheckErrorsNameMetric(t *testing.T) {
	loop := &probe.Spec{Kind: record.KindUSDT, Target: "/bin/x", Provider: "p", Name: "n"}
	for _, c := range []struct {
		cfg  exporter.Config
		want string
	}{
		{exporter.Config{Metrics: []*exporter.Metric{{Name: "a", Probe: loop}}},
			`metric "a" (metrics[0]): type "": want counter or histogram`},
		{exporter.Config{Metrics: []*exporter.Metric{{Name: "a", Type: exporter.Counter, Probe: loop}, {Name: "a", Type: exporter.Counter, Probe: loop}}},
			`metric "a" (metrics[1].name): "a" is defined twice (first as metrics[0])`},
		{exporter.Config{Metrics: []*exporter.Metric{{Name: "", Type: exporter.Counter, Probe: loop}}},
			`metrics[0]: name "" is not a Prometheus metric name`},
		{exporter.Config{Path: "agent.yaml", Metrics: []*exporter.Metric{{Name: "a", Probe: loop}}},
			`agent.yaml: metric "a" (metrics[0]): type ""`},
		{exporter.Config{Metrics: []*exporter.Metric{nil}}, `metrics[0]: nil metric`},
	} {
		err := c.cfg.Check()
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%v, want %q", err, c.want)
		}
		if err != nil && (strings.HasPrefix(err.Error(), ":") || strings.Contains(err.Error(), "line 0")) {
			t.Errorf("%v: an empty path or line 0", err)
		}
	}
	// A file's errors keep their file and line.
	_, err := exporter.ParseConfig("c.yaml", []byte("metrics:\n  - name: a\n    type: gauge\n    probe: /bin/x:p:n\n"), exporter.ParseProbe)
	if err == nil || err.Error() != `c.yaml:3: metrics[0].type: "gauge": want counter or histogram` {
		t.Errorf("file: %v", err)
	}
}

// TestApplyReportsFailed: Apply with one good and one unattachable metric
// returns an *ApplyError naming the bad one and why; the good one is
// attached and counts exactly (issue 40).
func TestApplyReportsFailed(t *testing.T) {
	testkit.RequireKernel(t)
	fixture := privateFixture(t, "usdt_sample")
	p := testkit.Start(t, fixture)
	cfg := &exporter.Config{Metrics: []*exporter.Metric{
		{Name: "good_loops_total", Type: exporter.Counter, Probe: &probe.Spec{Kind: record.KindUSDT, Target: fixture, Provider: "sample", Name: "loop"}},
		{Name: "bad_missing_total", Type: exporter.Counter, Probe: &probe.Spec{Kind: record.KindUSDT, Target: fixture, Provider: "sample", Name: "no_such_probe"}},
	}}
	if err := cfg.Check(); err != nil {
		t.Fatal(err)
	}
	x := exporter.New(exporter.Options{NoRuntimeMetrics: true})
	defer x.Close()
	err := x.Apply(cfg)
	var aerr *exporter.ApplyError
	if !errors.As(err, &aerr) {
		t.Fatalf("Apply: %v, want an *ApplyError", err)
	}
	if len(aerr.Failed) != 1 || aerr.Failed[0].Metric != "bad_missing_total" || aerr.Failed[0].Err == nil || aerr.Metrics != 2 {
		t.Fatalf("Apply: %+v, want bad_missing_total alone of 2", aerr)
	}
	if !strings.Contains(err.Error(), "bad_missing_total") || !strings.Contains(err.Error(), "no_such_probe") || strings.Contains(err.Error(), "good_loops_total") {
		t.Errorf("Apply: %v: want the bad metric and its probe named, not the good one", err)
	}
	if got := x.Attached(); !slices.Equal(got, []string{"good_loops_total"}) {
		t.Errorf("attached %v, want [good_loops_total]", got)
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(x); err != nil {
		t.Fatal(err)
	}
	if err := p.Loop("loop", 37); err != nil {
		t.Fatal(err)
	}
	got := gather(t, reg, "")
	want := map[string]float64{
		"good_loops_total": 37,
		`probekit_export_metric_attached{metric="good_loops_total"}`:      1,
		`probekit_export_metric_attached{metric="bad_missing_total"}`:     0,
		`probekit_export_attach_errors_total{metric="bad_missing_total"}`: 1,
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
	if _, ok := got["bad_missing_total"]; ok {
		t.Error("bad_missing_total served")
	}
	// Applied again, the good one is kept and the error is the same.
	if err := x.Apply(cfg); !errors.As(err, &aerr) || len(aerr.Failed) != 1 {
		t.Errorf("second Apply: %v", err)
	}
	// Without the bad one, nothing fails.
	if err := x.Apply(&exporter.Config{Metrics: cfg.Metrics[:1]}); err != nil {
		t.Errorf("Apply of the good one: %v", err)
	}
}

// TestApplyFailedKeepsPrevious: after a good Apply, an Apply whose new
// definition of the metric cannot attach leaves the previous definition
// attached and counting, its counts kept (issue 37 item 7). Before, the
// running program was detached before the load, and nothing counted.
func TestApplyFailedKeepsPrevious(t *testing.T) {
	testkit.RequireKernel(t)
	fixture := privateFixture(t, "usdt_sample")
	p := testkit.Start(t, fixture)
	good := &exporter.Config{Metrics: []*exporter.Metric{
		{Name: "loops_total", Type: exporter.Counter, Probe: &probe.Spec{Kind: record.KindUSDT, Target: fixture, Provider: "sample", Name: "loop"}},
	}}
	bad := &exporter.Config{Metrics: []*exporter.Metric{
		{Name: "loops_total", Type: exporter.Counter, Probe: &probe.Spec{Kind: record.KindUSDT, Target: fixture, Provider: "sample", Name: "no_such_probe"}},
	}}
	for _, cfg := range []*exporter.Config{good, bad} {
		if err := cfg.Check(); err != nil {
			t.Fatal(err)
		}
	}
	x := exporter.New(exporter.Options{NoRuntimeMetrics: true})
	defer x.Close()
	if err := x.Apply(good); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(x); err != nil {
		t.Fatal(err)
	}
	if err := p.Loop("loop", 11); err != nil {
		t.Fatal(err)
	}
	if got := gather(t, reg, "loops_total")["loops_total"]; got != 11 {
		t.Fatalf("loops_total = %v after the good Apply, want 11", got)
	}
	err := x.Apply(bad)
	var aerr *exporter.ApplyError
	if !errors.As(err, &aerr) || len(aerr.Failed) != 1 || !aerr.Failed[0].Previous || aerr.Failed[0].Metric != "loops_total" {
		t.Fatalf("Apply of the bad config: %v, want loops_total failed with its previous definition kept", err)
	}
	if !strings.Contains(err.Error(), "no_such_probe") || !strings.Contains(err.Error(), "previous definition stays attached") {
		t.Errorf("Apply: %v: want the probe named and the previous definition said kept", err)
	}
	if got := x.Attached(); !slices.Equal(got, []string{"loops_total"}) {
		t.Errorf("attached %v, want [loops_total]", got)
	}
	if err := p.Loop("loop", 37); err != nil {
		t.Fatal(err)
	}
	got := gather(t, reg, "")
	want := map[string]float64{
		"loops_total": 48,
		`probekit_export_metric_attached{metric="loops_total"}`:     1,
		`probekit_export_attach_errors_total{metric="loops_total"}`: 1,
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
	// The good config again: the kept program is the same definition,
	// so its counts go on.
	if err := x.Apply(good); err != nil {
		t.Fatal(err)
	}
	if err := p.Loop("loop", 2); err != nil {
		t.Fatal(err)
	}
	if got := gather(t, reg, "loops_total")["loops_total"]; got != 50 {
		t.Errorf("loops_total = %v after the good Apply again, want 50", got)
	}
}
