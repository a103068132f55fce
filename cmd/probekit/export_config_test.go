package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/probekit/probekit/exporter"
	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/probe"
	"github.com/probekit/probekit/procmaps"
	"github.com/probekit/probekit/record"
)

func parseExportConfig(t *testing.T, text string) (*exporter.Config, error) {
	t.Helper()
	return exporter.ParseConfig("c.yaml", []byte(text), exporter.ParseProbe)
}

func TestExportConfig(t *testing.T) {
	cfg, err := parseExportConfig(t, `
metrics:
  - name: pg_queries_total
    help: queries started
    type: counter
    probe: /usr/lib/postgresql/15/bin/postgres:postgresql:query__start
  - name: app_request_bytes
    type: histogram
    probe: /srv/app:app:request
    value: 2
    buckets: [64, 1024, 16384]
  - name: pg_query_seconds
    type: histogram
    probe: /usr/lib/postgresql/15/bin/postgres:postgresql:query__start
    end: /usr/lib/postgresql/15/bin/postgres:postgresql:query__done
  - name: py_calls_total
    type: counter
    probe: 'usdt:/usr/bin/python3.11:python:function__entry'
    max_series: 50
    labels:
      function: {arg: 2, string: true}
      line: {arg: 3}
  - name: malloc_bytes
    type: histogram
    probe: uprobe:libc.so.6:malloc
    value: 1
  - name: malloc_results
    type: histogram
    probe: uretprobe:libc.so.6:malloc
    value: ret
`)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Metrics) != 6 {
		t.Fatalf("%d metrics, want 6", len(cfg.Metrics))
	}
	m := cfg.Metrics
	if m[0].Name != "pg_queries_total" || m[0].Help != "queries started" || m[0].Type != exporter.Counter ||
		m[0].Probe.Provider != "postgresql" || m[0].Probe.Name != "query__start" || m[0].Line != 3 || !m[0].Value.IsZero() {
		t.Errorf("metric 0: %+v", m[0])
	}
	if m[1].Value != probe.Arg(2) || len(m[1].Buckets) != 3 || m[1].Buckets[2] != 16384 {
		t.Errorf("metric 1: value %v, buckets %v", m[1].Value, m[1].Buckets)
	}
	if !m[2].Latency() || m[2].End.Name != "query__done" || len(m[2].Buckets) == 0 || m[2].Buckets[0] >= 1e-3 {
		t.Errorf("metric 2: end %+v, buckets %v", m[2].End, m[2].Buckets)
	}
	if len(m[3].Labels) != 2 || m[3].Labels[0] != (exporter.Label{Name: "function", Arg: probe.Arg(2), String: true}) ||
		m[3].Labels[1] != (exporter.Label{Name: "line", Arg: probe.Arg(3)}) || m[3].MaxSeries != 50 {
		t.Errorf("metric 3: labels %+v, max_series %d", m[3].Labels, m[3].MaxSeries)
	}
	if m[4].Probe.Kind != record.KindUprobe || m[4].Probe.Func != "malloc" || m[4].Value != probe.Arg(1) {
		t.Errorf("metric 4: %+v value %v", m[4].Probe, m[4].Value)
	}
	if m[5].Probe.Kind != record.KindUretprobe || !m[5].Value.IsRet() {
		t.Errorf("metric 5: %+v value %v", m[5].Probe, m[5].Value)
	}
}

// TestExportConfigErrors: each mistake names its line and field.
func TestExportConfigErrors(t *testing.T) {
	const head = "metrics:\n  - name: a_total\n    type: counter\n"
	for _, c := range []struct{ text, want string }{
		{head + "    probe: /bin/x:p:n\n    valu: 2\n", "c.yaml:5: metrics[0].valu: unknown field"},
		{head + "    probe: /bin/x\n", "c.yaml:4: metrics[0].probe: \"/bin/x\": want [usdt:]TARGET:PROVIDER:NAME"},
		{head + "    probe: uprobe:/bin/x\n", "c.yaml:4: metrics[0].probe: \"uprobe:/bin/x\": want uprobe:TARGET:FUNC"},
		{head + "    probe: /bin/x:p:n\n" + head[len("metrics:\n"):] + "    probe: /bin/x:p:m\n", "c.yaml:5: metrics[1].name: \"a_total\" is defined twice (first on line 2)"},
		{"metrics:\n  - name: h\n    type: histogram\n    probe: /bin/x:p:n\n", "c.yaml:2: metrics[0].value: missing: a histogram counts an argument"},
		{"metrics:\n  - name: h\n    type: gauge\n    probe: /bin/x:p:n\n", "c.yaml:3: metrics[0].type: \"gauge\": want counter or histogram"},
		{"metrics:\n  - name: 9h\n    type: counter\n    probe: /bin/x:p:n\n", "c.yaml:2: metrics[0].name: \"9h\" is not a Prometheus metric name"},
		{"metrics:\n  - type: counter\n    probe: /bin/x:p:n\n", "c.yaml:2: metrics[0].name: missing"},
		{head + "    probe: /bin/x:p:n\n    value: 1\n", "c.yaml:5: metrics[0].value: a counter counts hits"},
		{"metrics:\n  - name: h\n    type: histogram\n    probe: /bin/x:p:n\n    value: 13\n", "c.yaml:5: metrics[0].value: \"13\": want an argument number from 1 to 12"},
		{"metrics:\n  - name: h\n    type: histogram\n    probe: uprobe:/bin/x:f\n    value: ret\n", "c.yaml:5: metrics[0].value: ret: only a uretprobe"},
		{"metrics:\n  - name: h\n    type: histogram\n    probe: /bin/x:p:n\n    value: 1\n    buckets: [3, 2]\n", "c.yaml:6: metrics[0].buckets[1]: 2: want bounds in increasing order"},
		{head + "    probe: /bin/x:p:n\n    labels:\n      le: {arg: 1}\n", "c.yaml:6: metrics[0].labels.le: \"le\" is not a label name"},
		{head + "    probe: /bin/x:p:n\n    labels:\n      a: {arg: 1, string: true}\n      b: {arg: 2, string: true}\n", "c.yaml:7: metrics[0].labels.b: at most one label is a string"},
		{head + "    probe: /bin/x:p:n\n    labels:\n      a: {argh: 1}\n", "c.yaml:6: metrics[0].labels.a.argh: unknown field"},
		// Names the registry would drop at the scrape (issue 21 item 11).
		{"metrics:\n  - name: go_goroutines\n    type: counter\n    probe: /bin/x:p:n\n", "c.yaml:2: metrics[0].name: \"go_goroutines\": names starting with go_ are the exporter's own"},
		{"metrics:\n  - name: process_open_fds\n    type: counter\n    probe: /bin/x:p:n\n", "c.yaml:2: metrics[0].name: \"process_open_fds\": names starting with process_"},
		{"metrics:\n  - name: probekit_export_x\n    type: counter\n    probe: /bin/x:p:n\n", "c.yaml:2: metrics[0].name: \"probekit_export_x\": names starting with probekit_export_"},
		{"metrics:\n  - name: hh\n    type: histogram\n    probe: /bin/x:p:n\n    value: 1\n  - name: hh_bucket\n    type: counter\n    probe: /bin/x:p:n\n", "c.yaml:6: metrics[1].name: \"hh_bucket\" writes samples named hh_bucket, as \"hh\" does (first on line 2)"},
		{"metrics:\n  - name: hh_count\n    type: counter\n    probe: /bin/x:p:n\n  - name: hh\n    type: histogram\n    probe: /bin/x:p:n\n    value: 1\n", "c.yaml:5: metrics[1].name: \"hh\" writes samples named hh_count, as \"hh_count\" does (first on line 2)"},
		{"metrics:\n  - name: hh\n    type: histogram\n    probe: /bin/x:p:n\n    value: 1\n  - name: hh_sum\n    type: histogram\n    probe: /bin/x:p:n\n    value: 1\n", "c.yaml:6: metrics[1].name: \"hh_sum\" writes samples named hh_sum, as \"hh\" does"},
		// Latency bounds are positive (item 15); a value's may be negative.
		{"metrics:\n  - name: l\n    type: histogram\n    probe: /bin/x:p:n\n    end: /bin/x:p:m\n    buckets: [0, 1]\n", "c.yaml:6: metrics[0].buckets[0]: 0: a latency bound is a positive number of seconds"},
		{"metrics:\n  - name: l\n    type: histogram\n    probe: /bin/x:p:n\n    end: /bin/x:p:m\n    buckets: [-1]\n", "c.yaml:6: metrics[0].buckets[0]: -1: a latency bound is a positive"},
		{head + "    probe: /bin/x:p:n\n    series_idle: 0s\n", "c.yaml:5: metrics[0].series_idle: \"0s\": want a positive duration"},
		{head + "    probe: /bin/x:p:n\n    labels:\n      p: {source: pid, arg: 1}\n", "c.yaml:6: metrics[0].labels.p.source: source pid reads no argument"},
		{head + "    probe: /bin/x:p:n\n    labels:\n      p: {source: tid}\n", "c.yaml:6: metrics[0].labels.p.source: \"tid\": want pid, comm or arg"},
		{head + "    probe: /bin/x:p:n\n    labels:\n      c: {source: comm}\n      s: {arg: 1, string: true}\n", "c.yaml:7: metrics[0].labels.s: at most one label is a string"},
		{head + "    probe: /bin/x:p:n\n    labels:\n      overflow: {arg: 1}\n", "c.yaml:6: metrics[0].labels.overflow: \"overflow\" is not a label name"},
		{"metrics:\n  - name: a\n   type: counter\n", "c.yaml:1: did not find expected '-' indicator"},
		{"metric: []\n", "c.yaml:1: metric: unknown field (want one of metrics)"},
		{"", "c.yaml: empty file"},
	} {
		_, err := parseExportConfig(t, c.text)
		var ce *exporter.ConfigError
		if !errors.As(err, &ce) || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%q:\n got %v\nwant %s...", c.text, err, c.want)
		}
	}
}

// TestExportConfigExit: the command refuses a bad or missing file with
// exit 1 and the error, before it needs root.
func TestExportConfigExit(t *testing.T) {
	bin := buildExporter(t)
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("metrics:\n  - name: a\n    type: counter\n    probe: /bin/x:p:n\n    bogus: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"export", "--config", bad}, 1, "bad.yaml:5: metrics[0].bogus: unknown field"},
		{[]string{"export", "--config", filepath.Join(dir, "none.yaml")}, 1, "no such file or directory"},
		{[]string{"export"}, 2, "--config FILE is required"},
		{[]string{"export", "--config", bad, "extra"}, 2, "unexpected argument"},
	} {
		code, errOut := runExportProcess(t, bin, c.args[1:]...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, %q; want exit %d and %q", c.args, code, errOut, c.code, c.want)
		}
	}
}

// TestExportConfigFIFO: a FIFO given as the configuration is refused at
// once, not waited on (issue 21 item 3).
func TestExportConfigFIFO(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fifo.yaml")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := exporter.LoadConfig(path, exporter.ParseProbe)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, procmaps.ErrNotRegular) {
			t.Errorf("FIFO config: %v, want %v", err, procmaps.ErrNotRegular)
		}
	case <-time.After(5 * time.Second):
		// Unblock the open, so that the goroutine ends.
		if f, err := os.OpenFile(path, os.O_WRONLY, 0); err == nil {
			f.Close()
		}
		<-done
		t.Fatal("LoadConfig blocked on a FIFO for 5 s")
	}
}

// TestExportExamples: the example configurations parse.
func TestExportExamples(t *testing.T) {
	for _, name := range []string{"postgresql.yaml", "python.yaml"} {
		cfg, err := exporter.LoadConfig(filepath.Join(testkit.Root(), "examples", "exporter", name), exporter.ParseProbe)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if len(cfg.Metrics) == 0 {
			t.Errorf("%s: no metric", name)
		}
	}
}

func FuzzExportConfig(f *testing.F) {
	for _, name := range []string{"postgresql.yaml", "python.yaml"} {
		if data, err := os.ReadFile(filepath.Join(testkit.Root(), "examples", "exporter", name)); err == nil {
			f.Add(data)
		}
	}
	f.Add([]byte("metrics:\n  - name: a\n    type: histogram\n    probe: /bin/x:p:n\n    value: 1\n    labels: {x: {arg: 2}}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := exporter.ParseConfig("f.yaml", data, exporter.ParseProbe)
		if err == nil && len(cfg.Metrics) == 0 {
			t.Fatal("no error and no metric")
		}
	})
}
