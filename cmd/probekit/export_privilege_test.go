package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/probekit/probekit/internal/privilege"
	"github.com/probekit/probekit/internal/test/testkit"
)

// TestExportAsNobody: probekit-export, run as nobody with the
// capabilities the privilege table names for it and more (CAP_NET_ADMIN,
// CAP_SYS_ADMIN where not needed), counts the hits of a fixture only
// root may read, drops the more once attached (every thread's effective and permitted sets are then
// what it logged), and still reloads a configuration with a new metric.
func TestExportAsNobody(t *testing.T) {
	testkit.RequireKernel(t) // root, to start it as nobody
	caps, err := privilege.Required(privilege.LoadBPF, privilege.LockMemory, privilege.OtherUser, privilege.UnreadableFile)
	if err != nil {
		t.Fatal(err)
	}
	keep, err := privilege.Required(privilege.LoadBPF, privilege.OtherUser, privilege.UnreadableFile)
	if err != nil {
		t.Fatal(err)
	}
	// Without cgo, as make build builds it: a cgo build cannot change
	// every thread's capabilities (buildExporter builds it so).
	bin := filepath.Join(buildExporter(t), exportBinary)
	dir := testkit.SharedTempDir(t)
	p, fx := privilegeFixture(t)
	config := filepath.Join(dir, "export.yaml")
	write := func(metrics ...string) {
		t.Helper()
		text := "metrics:\n"
		for _, m := range metrics {
			text += fmt.Sprintf("  - name: %s_total\n    type: counter\n    probe: %s:sample:%s\n", m, fx, m)
		}
		if err := os.WriteFile(config, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("loop")

	// More than it needs, to drop: CAP_NET_ADMIN, and CAP_SYS_ADMIN
	// where CAP_BPF and CAP_PERFMON do its work.
	extra := []privilege.Cap{privilege.CapNetAdmin}
	if !slices.Contains(caps, privilege.CapSysAdmin) {
		extra = append(extra, privilege.CapSysAdmin)
	}
	cmd := asNobody(bin, append(caps, extra...), "--config", config, "--listen", "127.0.0.1:0")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var logs []string
	log := func() string { mu.Lock(); defer mu.Unlock(); return strings.Join(logs, "\n") }
	served := make(chan string, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			mu.Lock()
			logs = append(logs, sc.Text())
			mu.Unlock()
			if _, a, ok := strings.Cut(sc.Text(), "serving "); ok {
				served <- a
			}
		}
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
		cmd.Wait()
	})
	var url string
	select {
	case url = <-served:
	case <-done:
		t.Fatalf("export exited: %s", log())
	case <-time.After(30 * time.Second):
		t.Fatalf("export not serving within 30 s: %s", log())
	}

	kept := privilege.SetOf(keep...)
	if want := fmt.Sprintf("capabilities kept: %v; dropped: %v", kept, privilege.SetOf(extra...)); !strings.Contains(log(), want) {
		t.Fatalf("log lacks %q:\n%s", want, log())
	}
	tasks, err := filepath.Glob("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/task/*/status")
	if err != nil || len(tasks) == 0 {
		t.Fatalf("threads: %v, %v", tasks, err)
	}
	for _, task := range tasks {
		b, err := os.ReadFile(task)
		if err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{"CapEff:", "CapPrm:", "CapAmb:"} {
			if got := capLine(t, b, key); got != kept {
				t.Errorf("%s: %s %v, want what it logged, %v", task, key, got, kept)
			}
		}
	}

	if err := p.Loop("loop", 7); err != nil {
		t.Fatal(err)
	}
	waitSample(t, url, "loop_total", 7)
	// A reload attaches a new metric with what was kept.
	write("loop", "zero")
	cmd.Process.Signal(syscall.SIGHUP)
	waitSample(t, url, `probekit_export_config_loads_total{result="success"}`, 2)
	if err := p.Loop("zero", 3); err != nil {
		t.Fatal(err)
	}
	got := waitSample(t, url, "zero_total", 3)
	wantSamples(t, got, map[string]float64{"loop_total": 7})

	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("export still running 20 s after SIGTERM")
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("export after SIGTERM: %v: %s", err, log())
	}
}

// capLine is the capability set of a /proc/PID/status line.
func capLine(t *testing.T, status []byte, key string) privilege.Set {
	t.Helper()
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, key); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return privilege.Set(n)
		}
	}
	t.Fatalf("no %s", key)
	return 0
}
