package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/probekit/probekit/exporter"
)

// pythonCalls is the script of TestExportFollow: it waits for a line on
// stdin, calls f n times with a profile function set (CPython 3.11 fires
// function__entry only then), says done and waits for stdin to close.
const pythonCalls = `import sys
n = int(sys.argv[1])
sys.stdin.readline()
sys.setprofile(lambda *a: None)
def f(): pass
for _ in range(n): f()
sys.setprofile(None)
print("done", flush=True)
sys.stdin.read()
`

// TestExportFollow: a metric whose TARGET is "*" counts the hits of a
// python started after the exporter attached, from a file (a private
// copy of python3.11: a new inode) that no process mapped before; the
// health metrics show the file.
func TestExportFollow(t *testing.T) {
	const python = "/usr/bin/python3.11"
	data, err := os.ReadFile(python)
	if err != nil {
		t.Skipf("no CPython 3.11: %v", err)
	}
	const config = `
metrics:
  - name: py_calls_total
    type: counter
    probe: '*:python:function__entry'
`
	x, url := startExporter(t, config)
	got := scrape(t, url)
	if got[`probekit_export_metric_attached{metric="py_calls_total"}`] != 1 {
		t.Fatalf("not attached: %v", got)
	}

	copyPath := filepath.Join(t.TempDir(), "python3.11")
	if err := os.WriteFile(copyPath, data, 0o755); err != nil {
		t.Fatal(err)
	}
	const n = 1000
	cmd := exec.Command(copyPath, "-c", pythonCalls, fmt.Sprint(n))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})

	// The watch attaches the new file a few milliseconds after the exec:
	// the calls start once the health metrics show it.
	sites := fmt.Sprintf(`probekit_export_metric_sites{file=%q,metric="py_calls_total"}`, copyPath)
	procs := fmt.Sprintf(`probekit_export_metric_processes{file=%q,metric="py_calls_total"}`, copyPath)
	deadline := time.Now().Add(10 * time.Second)
	for got = scrape(t, url); got[sites] == 0; got = scrape(t, url) {
		if time.Now().After(deadline) {
			t.Fatalf("%s not attached in 10 s: %s", copyPath, healthLines(got))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "done\n" {
		t.Fatalf("python: %q, %v", line, err)
	}

	// The counts are read at each scrape: the calls are in the maps once
	// the python said done, but wait by deadline all the same.
	const calls = `py_calls_total`
	deadline = time.Now().Add(10 * time.Second)
	for got = scrape(t, url); got[calls] < n; got = scrape(t, url) {
		if time.Now().After(deadline) {
			t.Fatalf("%s = %v, want at least %d", calls, got[calls], n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The python still runs (it waits for stdin to close): its file is
	// attached, and mapped by it.
	if got[sites] < 1 || got[procs] < 1 {
		t.Errorf("%s = %v, %s = %v; want both at least 1", sites, got[sites], procs, got[procs])
	}
	// A reload leaves the unchanged metric its watch and its counts.
	cfg, err := exporter.ParseConfig("test.yaml", []byte(config), exporter.ParseProbe)
	if err != nil {
		t.Fatal(err)
	}
	x.Apply(cfg)
	if got = scrape(t, url); got[calls] < n || got[sites] < 1 {
		t.Errorf("after a reload: %s = %v, %s = %v; want at least %d and 1", calls, got[calls], sites, got[sites], n)
	}
	if e := got[`probekit_export_attach_errors_total{metric="py_calls_total"}`]; e != 0 {
		t.Logf("attach errors in other processes: %v", e)
	}
}

// healthLines are the probekit_export_metric_* samples of got, for a
// failure message.
func healthLines(got map[string]float64) string {
	var b strings.Builder
	for k, v := range got {
		if strings.HasPrefix(k, "probekit_export_") {
			fmt.Fprintf(&b, "\n%s %v", k, v)
		}
	}
	return b.String()
}
