package exporter_test

import (
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/probekit/probekit/exporter"
	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/probe"
	"github.com/probekit/probekit/record"
)

// labelBytes builds testdata/label_bytes.c, whose probe label:str passes
// "ok\xff\xfebad" (fire bad) or "good" (fire good).
func labelBytes(t *testing.T) string {
	t.Helper()
	td := filepath.Join(testkit.Root(), "testdata")
	bin := filepath.Join(t.TempDir(), "label_bytes")
	if out, err := exec.Command("gcc", "-O2", "-I", td, "-o", bin, filepath.Join(td, "label_bytes.c")).CombinedOutput(); err != nil {
		t.Fatalf("build label_bytes: %v: %s", err, out)
	}
	return bin
}

// TestInvalidUTF8Label: a string label whose bytes are not UTF-8 is
// served with U+FFFD in their place, counted in
// probekit_export_label_invalid_utf8_hits; a real HTTP scrape gets 200
// and every metric, the labelled one included (issue 37 item 6).
func TestInvalidUTF8Label(t *testing.T) {
	testkit.RequireKernel(t)
	fixture := labelBytes(t)
	p := testkit.Start(t, fixture)
	pr := &probe.Spec{Kind: record.KindUSDT, Target: fixture, Provider: "label", Name: "str"}
	x, _ := start(t, &exporter.Config{Metrics: []*exporter.Metric{
		{Name: "str_total", Type: exporter.Counter, Probe: pr},
		{Name: "by_str_total", Type: exporter.Counter, Probe: pr, Labels: []exporter.Label{{Name: "s", Arg: probe.Arg(1), String: true}}},
	}})
	if err := p.Loop("bad", 200); err != nil {
		t.Fatal(err)
	}
	if err := p.Loop("good", 3); err != nil {
		t.Fatal(err)
	}
	_, addr, err := x.Serve("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get("http://" + addr.String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: %s: %s", resp.Status, body)
	}
	if !utf8.Valid(body) {
		t.Error("the page is not UTF-8")
	}
	for _, want := range []string{
		"str_total 203\n",
		"by_str_total{s=\"ok\uFFFDbad\"} 200\n",
		"by_str_total{s=\"good\"} 3\n",
		"probekit_export_label_invalid_utf8_hits{metric=\"by_str_total\"} 200\n",
		"probekit_export_metric_attached{metric=\"by_str_total\"} 1\n",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("no %q in the scrape", want)
		}
	}
}
