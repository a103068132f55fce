package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/probekit/probekit/internal/features"
	"github.com/probekit/probekit/internal/test/testkit"
)

// freePort returns a loopback port no one listened on a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// stopProcess sends SIGTERM to cmd and waits for it, killing it after
// 10 s.
func stopProcess(cmd *exec.Cmd) {
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-done
	}
}

// promQuery asks the Prometheus server at base for the instant value of
// query; ok is false while there is none.
func promQuery(base, query string) (v float64, ok bool, err error) {
	resp, err := scrapeClient.Get(base + "/api/v1/query?query=" + query)
	if err != nil {
		return 0, false, err
	}
	defer resp.Body.Close()
	var r struct {
		Status string
		Data   struct {
			Result []struct {
				Value [2]any
			}
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return 0, false, err
	}
	if r.Status != "success" || len(r.Data.Result) != 1 {
		return 0, false, nil
	}
	s, _ := r.Data.Result[0].Value[1].(string)
	v, err = strconv.ParseFloat(s, 64)
	return v, err == nil, err
}

// TestExportPrometheus: a Prometheus server scrapes the exporter, and its
// HTTP API returns the count, as a user's dashboard would read it.
func TestExportPrometheus(t *testing.T) {
	const server = "/usr/bin/prometheus"
	if _, err := os.Stat(server); err != nil {
		testkit.Unavailable(t, "no Prometheus server (Debian's prometheus, make deps): %v", err)
	}
	fixture := privateFixture(t, "usdt_sample")
	p := testkit.Start(t, fixture)
	_, url := startExporter(t, fmt.Sprintf("metrics:\n  - name: loop_total\n    type: counter\n    probe: %s:sample:loop\n", fixture))
	if err := p.Loop("loop", 42); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	target := strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/metrics")
	config := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(config, []byte(fmt.Sprintf(`global:
  scrape_interval: 250ms
scrape_configs:
  - job_name: probekit
    static_configs:
      - targets: [%q]
`, target)), 0o644); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(server, "--config.file="+config, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		fmt.Sprintf("--web.listen-address=127.0.0.1:%d", port))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer stopProcess(cmd)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	var v float64
	var ok bool
	for deadline := time.Now().Add(40 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		v, ok, err = promQuery(base, `loop_total{job="probekit"}`)
		if ok && v == 42 {
			break
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logf.Name())
			t.Fatalf("Prometheus: loop_total = %v (found %v, %v), want 42; its log:\n%s", v, ok, err, log)
		}
	}
	if v, ok, err := promQuery(base, `up{job="probekit"}`); !ok || v != 1 {
		t.Errorf("up = %v (%v, %v), want 1", v, ok, err)
	}
}

// TestExportPostgreSQL: queries through psql against a throwaway cluster
// count at postgresql:query__start, by query text, and their latency to
// query__done.
func TestExportPostgreSQL(t *testing.T) {
	testkit.RequireKernel(t)
	// Without cookies the exporter attaches postgres, a PIE, in each
	// process after it starts: psql's backend, forked for the test's
	// connection, runs its queries before that (5.10 in the VM matrix:
	// none counted).
	have, err := features.Have(features.Cookie)
	testkit.NeedFeature(t, have, err, "5.15", "BPF cookie: a PIE's processes forked later are attached one by one, after their first hits")
	c := startPostgres(t)
	postgres := filepath.Join(postgresBin, "postgres")
	_, url := startExporter(t, fmt.Sprintf(`
metrics:
  - name: pg_queries_total
    type: counter
    probe: %[1]s:postgresql:query__start
    labels:
      query: {arg: 1, string: true}
  - name: pg_query_seconds
    type: histogram
    probe: %[1]s:postgresql:query__start
    end: %[1]s:postgresql:query__done
    labels:
      query: {arg: 1, string: true}
`, postgres))
	const query = "SELECT 4242 AS probekit_export"
	args := []string{"-X", "-q", "-h", c.sock, "-U", "postgres", "-d", "postgres"}
	for range 5 {
		args = append(args, "-c", query)
	}
	if out := c.run(t, "psql", args...); strings.Count(out, "4242") != 5 {
		t.Fatalf("psql: %s", out)
	}
	label := fmt.Sprintf("{query=%q}", query)
	got := scrape(t, url)
	wantSamples(t, got, map[string]float64{
		"pg_queries_total" + label:                                   5,
		"pg_query_seconds_count" + label:                             5,
		`probekit_export_metric_attached{metric="pg_query_seconds"}`: 1,
	})
	if s := got["pg_query_seconds_sum"+label]; s <= 0 || s > 5 {
		t.Errorf("pg_query_seconds_sum = %v, want above 0 and below 5 s", s)
	}
}
