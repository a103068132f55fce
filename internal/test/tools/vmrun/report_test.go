package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestReportMergesShards: two VMs of one kernel, each running a share of
// one package's tests, make one column whose cell sums both shares; a
// failure and a skip are named with the shard that saw them.
func TestReportMergesShards(t *testing.T) {
	dir := t.TempDir()
	k := &kernelDir{name: "6.1", release: "6.1.0-50-amd64"}
	pkg := testPkg{Import: "github.com/probekit/probekit/cmd/probekit", Name: "cmd_probekit"}
	other := testPkg{Import: "github.com/probekit/probekit/unwind", Name: "unwind"}
	logs := map[string]string{
		"a/cmd_probekit.log": "=== RUN   TestA\n--- PASS: TestA (1.00s)\n=== RUN   TestB\n    b_test.go:9: uprobe_multi needs Linux 6.6\n--- SKIP: TestB (0.00s)\n",
		"b/cmd_probekit.log": "=== RUN   TestTraceX\n--- PASS: TestTraceX (2.00s)\n=== RUN   TestTraceY\n--- FAIL: TestTraceY (3.00s)\n",
		"b/unwind.log":       "=== RUN   TestU\n--- PASS: TestU (1.00s)\n=== RUN   TestV\n    v_test.go:3: helper process\n--- SKIP: TestV (0.00s)\n",
	}
	for name, text := range logs {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	runs := []*kernelRun{
		{kernel: k, label: "6.1/a", dir: filepath.Join(dir, "a"), pkgs: []testPkg{pkg}, wall: 90 * time.Second,
			pkgRun:  map[string]string{pkg.Import: "!^TestSlow$"},
			results: map[string]result{"cmd_probekit": {Name: "cmd_probekit", Finished: true}}},
		{kernel: k, label: "6.1/b", dir: filepath.Join(dir, "b"), pkgs: []testPkg{pkg, other}, wall: 2 * time.Minute,
			results: map[string]result{"cmd_probekit": {Name: "cmd_probekit", Exit: 1, Finished: true}, "unwind": {Name: "unwind", Finished: true}}},
	}
	var out bytes.Buffer
	err := report(&out, runs, 3*time.Minute)
	if err == nil {
		t.Errorf("report: no error with a failed test")
	}
	text := out.String()
	header := ""
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "package") {
			header = line
		}
	}
	if strings.Count(header, "6.1 (") != 1 {
		t.Errorf("header %q: want one 6.1 column", header)
	}
	for _, want := range []string{
		"cmd/probekit                                 FAIL 2 fail 1 skip 1",
		"unwind                                       ok 1 skip 1",
		"6.1/b SKIP NAMES NO KERNEL FEATURE unwind TestV: helper process",
		"cmd/probekit: ^TestSlow$ (6.1/a)",
		"1m30s + 2m0s",
		"6.1/b FAIL cmd/probekit TestTraceY",
		"6.1/a skip cmd/probekit TestB: uprobe_multi needs Linux 6.6",
		"kernels: 3 passed, 1 failed, 2 skipped",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %q:\n%s", want, text)
		}
	}
	// Failures last, after the skips and the tests left out: the tail of
	// a long CI log is what shows.
	fail, skip, left := strings.Index(text, "6.1/b FAIL cmd/probekit TestTraceY"), strings.Index(text, "6.1/a skip cmd/probekit TestB"), strings.Index(text, "not run in these VMs")
	if fail < skip || fail < left {
		t.Errorf("the failure is not after the skips and the tests left out:\n%s", text)
	}
}

// TestOutcomeMerge: a share that only skipped does not make a column
// "skip" when another share passed; the worst status wins otherwise.
func TestOutcomeMerge(t *testing.T) {
	for _, c := range []struct{ a, b, want string }{
		{"skip", "ok", "ok"},
		{"ok", "skip", "ok"},
		{"skip", "skip", "skip"},
		{"ok", "FAIL", "FAIL"},
		{"lost", "ok", "lost"},
	} {
		a := pkgOutcome{status: c.a}
		b := pkgOutcome{status: c.b}
		if c.a == "ok" {
			a.pass = 1
		}
		if c.b == "ok" {
			b.pass = 1
		}
		if got := a.merge(b).status; got != c.want {
			t.Errorf("%s + %s = %s, want %s", c.a, c.b, got, c.want)
		}
	}
}

// TestReportSkipReasons: a skip that names the absent kernel feature
// passes the matrix; one that names none (a helper, a short-mode skip)
// fails it, since in the matrix a test either runs or says which kernel
// feature it lacks.
func TestReportSkipReasons(t *testing.T) {
	k := &kernelDir{name: "5.10", release: "5.10.0-32-amd64"}
	pkg := testPkg{Import: "github.com/probekit/probekit/usdt", Name: "usdt"}
	for _, c := range []struct {
		reason string
		fails  bool
	}{
		{"BPF cookie (Linux 5.15) needs Linux 5.15; running 5.10.0", false},
		{"helper process for TestX", true},
		{"load test", true},
	} {
		dir := t.TempDir()
		text := "=== RUN   TestA\n--- PASS: TestA (1.00s)\n=== RUN   TestB\n    b_test.go:9: " + c.reason + "\n--- SKIP: TestB (0.00s)\n"
		if err := os.WriteFile(filepath.Join(dir, "usdt.log"), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		runs := []*kernelRun{{kernel: k, label: "5.10", dir: dir, pkgs: []testPkg{pkg},
			results: map[string]result{"usdt": {Name: "usdt", Finished: true}}}}
		var out bytes.Buffer
		if err := report(&out, runs, time.Minute); (err != nil) != c.fails {
			t.Errorf("skip %q: report error %v, want failure %v\n%s", c.reason, err, c.fails, out.String())
		}
	}
}
