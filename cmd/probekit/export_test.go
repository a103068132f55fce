package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/probekit/probekit/exporter"
	"github.com/probekit/probekit/internal/features"
	"github.com/probekit/probekit/internal/test/testkit"
)

// privateFixture copies a fixture into the test's temporary directory:
// its probes, attached by path in every process that maps the copy, then
// count this test's hits only, not those of other tests that run the
// fixture meanwhile.
func privateFixture(t testing.TB, name string) string {
	t.Helper()
	data, err := os.ReadFile(testkit.Fixture(name))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, data, 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// scrapeClient makes one connection per scrape: none is left open when a
// test ends (TestMain checks file descriptors).
var scrapeClient = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// startExporter serves config on a loopback port until the test ends and
// returns the /metrics URL.
func startExporter(t testing.TB, config string) (*exporter.Exporter, string) {
	t.Helper()
	testkit.RequireKernel(t)
	cfg, err := exporter.ParseConfig("test.yaml", []byte(config), exporter.ParseProbe)
	if err != nil {
		t.Fatal(err)
	}
	x := exporter.New(exporter.Options{})
	t.Cleanup(func() { x.Close() })
	x.Apply(cfg)
	_, addr, err := x.Serve("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return x, "http://" + addr.String() + "/metrics"
}

// funcRefusal is what the exporter says of a metric on a function probe
// without BPF cookies.
const funcRefusal = "function probes: not supported: BPF cookie (Linux 5.15)"

// funcProbes reports whether metrics on function probes attach here:
// the kernel has BPF cookies. Without them (a kernel before 5.15, or
// forced off), the test checks the refusal (funcRefused) instead.
func funcProbes(t *testing.T) bool {
	t.Helper()
	testkit.RequireKernel(t)
	ok, err := features.Have(features.Cookie)
	if err != nil {
		t.Fatal(err)
	}
	if !ok && !features.Forced(features.Cookie) {
		testkit.MissingFeature(t, features.Cookie.Since(), features.Cookie.String())
	}
	return ok
}

// funcRefused applies config, whose metrics are all on function probes,
// and checks that each is refused naming funcRefusal, and that /metrics
// shows each not attached with one attach error.
func funcRefused(t *testing.T, config string) {
	t.Helper()
	cfg, err := exporter.ParseConfig("test.yaml", []byte(config), exporter.ParseProbe)
	if err != nil {
		t.Fatal(err)
	}
	x := exporter.New(exporter.Options{})
	defer x.Close()
	err = x.Apply(cfg)
	var aerr *exporter.ApplyError
	if !errors.As(err, &aerr) || len(aerr.Failed) != len(cfg.Metrics) {
		t.Fatalf("Apply: %v; want each of %d function metrics refused", err, len(cfg.Metrics))
	}
	_, addr, err := x.Serve("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	got := scrape(t, "http://"+addr.String()+"/metrics")
	for i, f := range aerr.Failed {
		name := cfg.Metrics[i].Name
		if f.Metric != name || !strings.Contains(f.Error(), funcRefusal) {
			t.Errorf("Apply refused %s: %v; want %s refused with %q", f.Metric, f, name, funcRefusal)
		}
		wantSamples(t, got, map[string]float64{
			fmt.Sprintf(`probekit_export_metric_attached{metric=%q}`, name):     0,
			fmt.Sprintf(`probekit_export_attach_errors_total{metric=%q}`, name): 1,
		})
	}
}

// scrape returns the samples of url by series ("name{labels}"), as the
// text exposition format writes them.
func scrape(t testing.TB, url string) map[string]float64 {
	t.Helper()
	s, err := scrapeSamples(url)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func scrapeSamples(url string) (map[string]float64, error) {
	resp, err := scrapeClient.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("%s: %s: %s", url, resp.Status, b)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if i < 0 || err != nil {
			return nil, fmt.Errorf("line %q", line)
		}
		out[line[:i]] = v
	}
	return out, sc.Err()
}

// wantSamples checks the samples named in want.
func wantSamples(t *testing.T, got map[string]float64, want map[string]float64) {
	t.Helper()
	for k, v := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("%s: missing", k)
		} else if g != v {
			t.Errorf("%s = %v, want %v", k, g, v)
		}
	}
}

func TestExportUSDT(t *testing.T) {
	fixture := privateFixture(t, "usdt_sample")
	p := testkit.Start(t, fixture)
	_, url := startExporter(t, fmt.Sprintf(`
metrics:
  - name: loop_total
    type: counter
    probe: %[1]s:sample:loop
  - name: loop_r1
    help: r + 1
    type: histogram
    probe: %[1]s:sample:loop
    value: 2
    buckets: [10, 50.5]
  - name: loop_neg
    type: histogram
    probe: %[1]s:sample:loop
    value: 3
    buckets: [-50, 0]
  - name: loop_by_round_total
    type: counter
    probe: %[1]s:sample:loop
    max_series: 10
    labels:
      round: {arg: 1}
`, fixture))
	if err := p.Loop("loop", 100); err != nil {
		t.Fatal(err)
	}
	got := scrape(t, url)
	// Round r passes r, r + 1, -r, r.
	wantSamples(t, got, map[string]float64{
		"loop_total":                     100,
		"loop_r1_count":                  100,
		"loop_r1_sum":                    5050,
		`loop_r1_bucket{le="10"}`:        10,
		`loop_r1_bucket{le="50.5"}`:      50,
		`loop_r1_bucket{le="+Inf"}`:      100,
		"loop_neg_sum":                   -4950,
		`loop_neg_bucket{le="-50"}`:      50,
		`loop_neg_bucket{le="0"}`:        100,
		`loop_by_round_total{round="0"}`: 1,
		`loop_by_round_total{round="9"}`: 1,
		// The first 10 rounds have a series each; the other 90 fold.
		`loop_by_round_total{overflow="true",round="other"}`:                             90,
		`probekit_export_label_folded_total{metric="loop_by_round_total"}`:               90,
		`probekit_export_metric_attached{metric="loop_total"}`:                           1,
		`probekit_export_lost_updates_total{metric="loop_r1",reason="value_unreadable"}`: 0,
	})
	if _, ok := got[`loop_by_round_total{round="10"}`]; ok {
		t.Error("a series past max_series")
	}
	if n := got[fmt.Sprintf(`probekit_export_metric_sites{file=%q,metric="loop_total"}`, fixture)]; n != 1 {
		t.Errorf("loop_total: %v sites in %s, want 1", n, fixture)
	}
	if n := got[fmt.Sprintf(`probekit_export_metric_processes{file=%q,metric="loop_total"}`, fixture)]; n != 1 {
		t.Errorf("loop_total: %v processes map %s, want 1", n, fixture)
	}
	if _, ok := got["go_goroutines"]; !ok {
		t.Error("no go_* metrics")
	}
	if _, ok := got["process_open_fds"]; !ok {
		t.Error("no process_* metrics")
	}
}

// TestExportFunc: function probes on every process mapping the file,
// started after the attach: argument and return value histograms, a
// string label, and the latency from entry to return. Without BPF
// cookies each is refused, naming them.
func TestExportFunc(t *testing.T) {
	fixture := privateFixture(t, "func_args")
	config := fmt.Sprintf(`
metrics:
  - name: sum6_e
    type: histogram
    probe: uprobe:%[1]s:sum6
    value: 5
    buckets: [4999999999, 5000000000]
  - name: sum6_calls_total
    type: counter
    probe: uprobe:%[1]s:sum6
    labels:
      round: {arg: 1}
  - name: count_char_ret
    type: histogram
    probe: uretprobe:%[1]s:count_char
    value: ret
    buckets: [1, 2]
  - name: count_char_by_text_total
    type: counter
    probe: uprobe:%[1]s:count_char
    labels:
      text: {arg: 1, string: true}
      char: {arg: 2}
  - name: sum6_seconds
    type: histogram
    probe: uprobe:%[1]s:sum6
    end: uretprobe:%[1]s:sum6
`, fixture)
	if !funcProbes(t) {
		funcRefused(t, config)
		return
	}
	_, url := startExporter(t, config)
	for range 2 {
		if out, err := exec.Command(fixture, "7").CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", fixture, err, out)
		}
	}
	got := scrape(t, url)
	wantSamples(t, got, map[string]float64{
		"sum6_e_count":                        14,
		"sum6_e_sum":                          14 * 5e9,
		`sum6_e_bucket{le="4.999999999e+09"}`: 0,
		`sum6_e_bucket{le="5e+09"}`:           14,
		`sum6_calls_total{round="0"}`:         2,
		`sum6_calls_total{round="6"}`:         2,
		"count_char_ret_count":                14,
		"count_char_ret_sum":                  28,
		`count_char_ret_bucket{le="1"}`:       0,
		`count_char_ret_bucket{le="2"}`:       14,
		"sum6_seconds_count":                  14,
		`sum6_seconds_bucket{le="+Inf"}`:      14,
		`count_char_by_text_total{char="45",text="probekit-func-args"}`:                        14,
		`probekit_export_lost_updates_total{metric="sum6_seconds",reason="end_without_start"}`: 0,
	})
	if s := got["sum6_seconds_sum"]; s <= 0 || s > 1 {
		t.Errorf("sum6_seconds_sum = %v, want above 0 and below 1 s", s)
	}
}

// TestExportAttachFailure: a metric that cannot attach is reported, the
// others count.
func TestExportAttachFailure(t *testing.T) {
	fixture := privateFixture(t, "usdt_sample")
	p := testkit.Start(t, fixture)
	x, url := startExporter(t, fmt.Sprintf(`
metrics:
  - name: missing_total
    type: counter
    probe: %[1]s:sample:no_such_probe
  - name: loop_total
    type: counter
    probe: %[1]s:sample:loop
`, fixture))
	if err := p.Loop("loop", 3); err != nil {
		t.Fatal(err)
	}
	wantSamples(t, scrape(t, url), map[string]float64{
		"loop_total": 3,
		`probekit_export_metric_attached{metric="missing_total"}`:     0,
		`probekit_export_attach_errors_total{metric="missing_total"}`: 1,
		`probekit_export_metric_attached{metric="loop_total"}`:        1,
	})
	if a := x.Attached(); len(a) != 1 || a[0] != "loop_total" {
		t.Errorf("attached %v, want [loop_total]", a)
	}
}

// TestExportScrapeRace: scrapes while processes that hit the probes start
// and exit, and while the configuration is applied again, are safe (run
// under -race) and lose no hit. Without BPF cookies, where the function
// metrics are refused, the scrapes and applies race with the hits of a
// USDT counter in one running process.
func TestExportScrapeRace(t *testing.T) {
	fixture := privateFixture(t, "func_args")
	config := fmt.Sprintf(`
metrics:
  - name: sum6_calls_total
    type: counter
    probe: uprobe:%[1]s:sum6
  - name: sum6_seconds
    type: histogram
    probe: uprobe:%[1]s:sum6
    end: uretprobe:%[1]s:sum6
`, fixture)
	run := func() {
		if out, err := exec.Command(fixture, "3").CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", fixture, err, out)
		}
	}
	counts := []string{"sum6_calls_total", "sum6_seconds_count"}
	if !funcProbes(t) {
		funcRefused(t, config)
		fixture = privateFixture(t, "usdt_sample")
		p := testkit.Start(t, fixture)
		config = fmt.Sprintf(`
metrics:
  - name: loop_total
    type: counter
    probe: %[1]s:sample:loop
`, fixture)
		run = func() {
			if err := p.Loop("loop", 3); err != nil {
				t.Fatal(err)
			}
		}
		counts = []string{"loop_total"}
	}
	x, url := startExporter(t, config)
	cfg, err := exporter.ParseConfig("test.yaml", []byte(config), exporter.ParseProbe)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	errs := make(chan error, 3)
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					errs <- nil
					return
				default:
				}
				if _, err := scrapeSamples(url); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			x.Apply(cfg) // unchanged: keeps the programs
			time.Sleep(10 * time.Millisecond)
		}
	})
	runs := 0
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline) || runs < 3; runs++ {
		run()
	}
	close(stop)
	wg.Wait()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]float64{}
	for _, k := range counts {
		want[k] = float64(3 * runs)
	}
	wantSamples(t, scrape(t, url), want)
}
