package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/probekit/probekit/internal/test/testkit"
)

// TestExportReloadFIFO: a SIGHUP while the configuration is a FIFO
// neither blocks nor keeps SIGTERM from stopping the exporter; the
// running configuration stays (issue 21 item 3).
func TestExportReloadFIFO(t *testing.T) {
	testkit.RequireKernel(t)
	fixture := privateFixture(t, "usdt_sample")
	config := filepath.Join(t.TempDir(), "export.yaml")
	if err := os.WriteFile(config, fmt.Appendf(nil, "metrics:\n  - name: loop_total\n    type: counter\n    probe: %s:sample:loop\n", fixture), 0o644); err != nil {
		t.Fatal(err)
	}
	e := startExportProcess(t, "--config", config, "--listen", "127.0.0.1:0")
	if err := os.Remove(config); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(config, 0o600); err != nil {
		t.Fatal(err)
	}
	e.cmd.Process.Signal(syscall.SIGHUP)
	waitSample(t, e.url, `probekit_export_config_loads_total{result="failure"}`, 1)
	waitSample(t, e.url, `probekit_export_metric_attached{metric="loop_total"}`, 1)
	e.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-e.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("export still running 10 s after SIGTERM: %s", e.log())
	}
	if err := e.cmd.Wait(); err != nil {
		t.Errorf("export after SIGTERM: %v: %s", err, e.log())
	}
	if !strings.Contains(e.log(), "not a regular file") {
		t.Errorf("log lacks the FIFO's refusal:\n%s", e.log())
	}
}

// TestExportBindFirst: with the port taken, the exporter fails on the
// bind before it attaches anything (issue 21 item 4).
func TestExportBindFirst(t *testing.T) {
	testkit.RequireKernel(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	fixture := privateFixture(t, "usdt_sample")
	config := filepath.Join(t.TempDir(), "export.yaml")
	if err := os.WriteFile(config, fmt.Appendf(nil, "metrics:\n  - name: loop_total\n    type: counter\n    probe: %s:sample:loop\n", fixture), 0o644); err != nil {
		t.Fatal(err)
	}
	code, errOut := runExportProcess(t, buildExporter(t), "--config", config, "--listen", ln.Addr().String())
	if code != 1 || !strings.Contains(errOut, "address already in use") {
		t.Errorf("exit %d, %q; want exit 1 and address already in use", code, errOut)
	}
	if strings.Contains(errOut, "attached") {
		t.Errorf("attached before the bind failed: %q", errOut)
	}
}

// vmRSS returns the resident set of process pid, in bytes.
func vmRSS(t *testing.T, pid int) uint64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}

// slowClients opens n connections to addr that each send a scrape and
// never read, and returns a function that closes them.
func slowClients(t *testing.T, addr string, n int) func() {
	t.Helper()
	var conns []net.Conn
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		// A small receive buffer: the page stays in the exporter, not
		// in the kernel.
		c.(*net.TCPConn).SetReadBuffer(4096)
		if _, err := fmt.Fprintf(c, "GET /metrics HTTP/1.1\r\nHost: %s\r\n\r\n", addr); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	return func() {
		for _, c := range conns {
			c.Close()
		}
	}
}

// TestExportSlowClients: with a page of 10,000 series, clients that send
// a scrape and never read hold connections, not memory: the exporter (a
// process of its own) stays under 120 MB with 30 of them and with 300,
// normal scrapes are answered meanwhile, and the memory is returned
// after (issue 21 item 2).
func TestExportSlowClients(t *testing.T) {
	testkit.RequireKernel(t)
	fixture := privateFixture(t, "usdt_sample")
	p := testkit.Start(t, fixture)
	config := filepath.Join(t.TempDir(), "export.yaml")
	if err := os.WriteFile(config, fmt.Appendf(nil, `metrics:
  - name: loop_by_round_total
    help: Hits by round.
    type: counter
    probe: %s:sample:loop
    max_series: 10000
    labels:
      round: {arg: 1}
`, fixture), 0o644); err != nil {
		t.Fatal(err)
	}
	e := startExportProcess(t, "--config", config, "--listen", "127.0.0.1:0")
	if err := p.Loop("loop", 10000); err != nil {
		t.Fatal(err)
	}
	got := waitSample(t, e.url, `loop_by_round_total{round="9999"}`, 1)
	if n := len(got); n < 10000 {
		t.Fatalf("%d samples, want 10,000 series", n)
	}
	addr := strings.TrimSuffix(strings.TrimPrefix(e.url, "http://"), "/metrics")
	pid := exporterPID(t, e)
	before := vmRSS(t, pid)
	for _, c := range []struct {
		clients int
		limit   uint64
	}{{30, 120 << 20}, {300, 120 << 20}} {
		closeAll := slowClients(t, addr, c.clients)
		// The clients' requests are served meanwhile: wait until a normal
		// scrape is, then measure.
		start := time.Now()
		if _, err := scrapeSamples(e.url); err != nil {
			closeAll()
			t.Fatalf("%d slow clients: normal scrape: %v", c.clients, err)
		}
		took := time.Since(start)
		time.Sleep(time.Second)
		during := vmRSS(t, pid)
		closeAll()
		t.Logf("%d slow clients: RSS %d MB before, %d MB during; a normal scrape took %v", c.clients, before>>20, during>>20, took.Round(time.Millisecond))
		if during > c.limit {
			t.Errorf("%d slow clients: RSS %d MB, want under %d MB", c.clients, during>>20, c.limit>>20)
		}
	}
	// Memory is returned: within a deadline, RSS comes back near where it
	// started (the Go runtime returns freed memory to the system within
	// minutes, sooner under debug.FreeOSMemory; here the pages were never
	// copied per client, so there is little to return).
	var after uint64
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		if after = vmRSS(t, pid); after < before+40<<20 {
			break
		}
	}
	t.Logf("RSS %d MB after the clients left", after>>20)
	if after >= before+40<<20 {
		t.Errorf("RSS %d MB after the clients left, %d MB before", after>>20, before>>20)
	}
}

// exporterPID is the pid of the probekit-export process behind e: the
// helper process execs it, so it is e's own pid.
func exporterPID(t *testing.T, e *exportProcess) int {
	t.Helper()
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", e.cmd.Process.Pid))
	if err != nil || filepath.Base(exe) != exportBinary {
		t.Fatalf("pid %d runs %q (%v), want %s", e.cmd.Process.Pid, exe, err, exportBinary)
	}
	return e.cmd.Process.Pid
}
