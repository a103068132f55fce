package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/probekit/probekit/internal/test/testkit"
)

// exportHelperEnv makes the test binary run `probekit export` with the
// arguments in it (TestExportHelperProcess): a process of its own to send
// signals to.
const exportHelperEnv = "PROBEKIT_EXPORT_HELPER_ARGS"

func TestExportHelperProcess(t *testing.T) {
	args, ok := os.LookupEnv(exportHelperEnv)
	if !ok {
		t.Skip("helper process of TestExportSignals")
	}
	argv := []string{"export"}
	if args != "" {
		argv = append(argv, strings.Split(args, "\n")...)
	}
	os.Exit(run(argv, os.Stdout, os.Stderr))
}

// exportProcess is `probekit export` running in a process of its own.
type exportProcess struct {
	cmd  *exec.Cmd
	url  string
	mu   sync.Mutex
	logs []string
	done chan struct{}
}

func startExportProcess(t *testing.T, args ...string) *exportProcess {
	t.Helper()
	cmd := exportHelperCommand(buildExporter(t), args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	e := &exportProcess{cmd: cmd, done: make(chan struct{})}
	addr := make(chan string, 1)
	go func() {
		defer close(e.done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			e.mu.Lock()
			e.logs = append(e.logs, line)
			e.mu.Unlock()
			if _, a, ok := strings.Cut(line, "serving "); ok {
				addr <- a
			}
		}
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-e.done
		cmd.Wait()
	})
	select {
	case e.url = <-addr:
	case <-e.done:
		t.Fatalf("export exited: %s", e.log())
	case <-time.After(30 * time.Second):
		t.Fatalf("export not serving within 30s: %s", e.log())
	}
	return e
}

func (e *exportProcess) log() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return strings.Join(e.logs, "\n")
}

// waitSample scrapes url until sample has value v, or fails at the
// deadline.
func waitSample(t *testing.T, url, sample string, v float64) map[string]float64 {
	t.Helper()
	var got map[string]float64
	var err error
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if got, err = scrapeSamples(url); err == nil && got[sample] == v {
			return got
		}
	}
	t.Fatalf("%s: %v (%v), want %v", sample, got[sample], err, v)
	return nil
}

// TestExportSignals: SIGHUP reloads, keeping the counts of a metric left
// as it was, dropping a removed one and refusing a bad file; SIGTERM
// detaches and exits 0.
func TestExportSignals(t *testing.T) {
	testkit.RequireKernel(t)
	fixture := privateFixture(t, "usdt_sample")
	p := testkit.Start(t, fixture)
	config := filepath.Join(t.TempDir(), "export.yaml")
	write := func(text string) {
		t.Helper()
		if err := os.WriteFile(config, []byte(fmt.Sprintf(text, fixture)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const loopTotal = `
  - name: loop_total
    type: counter
    probe: %[1]s:sample:loop
`
	write("metrics:" + loopTotal + `
  - name: loop_r1
    type: histogram
    probe: %[1]s:sample:loop
    value: 2
`)
	e := startExportProcess(t, "--config", config, "--listen", "127.0.0.1:0")
	if err := p.Loop("loop", 5); err != nil {
		t.Fatal(err)
	}
	waitSample(t, e.url, "loop_r1_count", 5)

	write("metrics:" + loopTotal + `
  - name: zero_total
    type: counter
    probe: %[1]s:sample:zero
`)
	e.cmd.Process.Signal(syscall.SIGHUP)
	waitSample(t, e.url, `probekit_export_config_loads_total{result="success"}`, 2)
	if err := p.Loop("loop", 5); err != nil {
		t.Fatal(err)
	}
	if err := p.Loop("zero", 3); err != nil {
		t.Fatal(err)
	}
	got := waitSample(t, e.url, "loop_total", 10)
	wantSamples(t, got, map[string]float64{"zero_total": 3})
	if _, ok := got["loop_r1_count"]; ok {
		t.Error("loop_r1 still served after its removal")
	}

	write("metrics:\n  - name: loop_total\n    help: \"%[1]s\"\n    type: counter\n")
	e.cmd.Process.Signal(syscall.SIGHUP)
	waitSample(t, e.url, `probekit_export_config_loads_total{result="failure"}`, 1)
	if err := p.Loop("loop", 1); err != nil {
		t.Fatal(err)
	}
	waitSample(t, e.url, "loop_total", 11)

	e.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-e.done:
	case <-time.After(20 * time.Second):
		t.Fatal("export still running 20s after SIGTERM")
	}
	if err := e.cmd.Wait(); err != nil {
		t.Errorf("export after SIGTERM: %v: %s", err, e.log())
	}
	for _, want := range []string{"reloaded", "metrics[0].probe: missing", "terminated: detaching"} {
		if !strings.Contains(e.log(), want) {
			t.Errorf("log lacks %q:\n%s", want, e.log())
		}
	}
}
