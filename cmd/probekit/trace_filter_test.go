package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/probekit/probekit/internal/test/testkit"
)

// --filter on malloc's size (arg1), which func_args passes as 4242 +
// round: all of them pass > 4096, those of rounds 59 on pass > 4300, and
// && binds before ||.
func TestTraceFilterMalloc(t *testing.T) {
	testkit.RequireKernel(t)
	requireAMD64(t)
	fx := testkit.Fixture("func_args")
	const n = 200
	for _, c := range []struct {
		expr string
		want uint64
	}{
		{"arg1 > 4096", n},
		{"arg1 > 4300", n - 59},
		{"arg1 <= 4300", 59},
		{"arg1 >= 4300 && arg1 < 4310 || arg1 == 4242", 11},
		{"arg1 == 4242 || arg1 >= 4300 && arg1 < 4310", 11},
		{"arg1 != 4242 && arg1 < 4245", 2},
		{"arg1 < 0", 0},
		// Eight terms, the most, the last passing.
		{"pid == 1 || pid == 2 || pid == 3 || tid == 4 || pid == 5 || comm == \"x\" || comm != \"func_*\" || arg1 < 4250", 8},
	} {
		got := aggregateJSON[countLine](t, append(launchedLibrary(t), "--count", "--filter", c.expr, "uprobe:libc.so.6:malloc", "--", fx, itoa(n))...)
		if len(got) != 1 || got[0].Count != c.want {
			t.Errorf("--filter %q: counts %+v, want %d", c.expr, got, c.want)
		}
	}
	// A string argument (count_char's text) and a return value, on hits
	// that are sent.
	hits := traceJSON(t, "--filter", `str1 == "probekit-*" && arg2 == 45`, "uprobe:"+fx+":count_char", "--", fx, "7")
	if len(hits) != 7 {
		t.Errorf("%d hits of count_char with a probekit- text, want 7", len(hits))
	}
	for _, expr := range []string{`str1 == "probekit-func-arg"`, `str1 != "probekit-*"`, `str1 == "probekit-func-args" && arg2 != 45`} {
		if got := aggregateJSON[countLine](t, "--count", "--filter", expr, "uprobe:"+fx+":count_char", "--", fx, "7"); len(got) != 1 || got[0].Count != 0 {
			t.Errorf("--filter %q: %+v, want no hit", expr, got)
		}
	}
	got := aggregateJSON[countLine](t, "--count", "--filter", "ret == 2", "uretprobe:"+fx+":count_char", "--", fx, "7")
	if len(got) != 1 || got[0].Count != 7 {
		t.Errorf("count_char returning 2: %+v, want 7", got)
	}
}

// The fixture's own sum6(r, -2, ...), named by path: its registers are
// known before load (C's), so the filter is compiled without the site's
// cookie (and runs on kernels without BPF cookies); arg7 is not a value
// sum6's probe sends.
func TestTraceFilterFuncByPath(t *testing.T) {
	testkit.RequireKernel(t)
	requireAMD64(t)
	fx := testkit.Fixture("func_args")
	for _, c := range []struct {
		expr string
		want uint64
	}{{"arg1 < 3", 3}, {"arg1 >= 3 && arg2 == -2", 4}, {"arg1 > 100 || arg7 == 0", 0}, {"arg7 == 0 || arg1 == 5", 1}} {
		got := aggregateJSON[countLine](t, "--count", "--filter", c.expr, "uprobe:"+fx+":sum6", "--", fx, "7")
		if len(got) != 1 || got[0].Count != c.want {
			t.Errorf("sum6 --filter %q: counts %+v, want %d", c.expr, got, c.want)
		}
	}
}

// comm and pid filters on two processes of one program (run under two
// names, so two command names), traced host-wide: every hit shown is of
// the process the filter names.
func TestTraceFilterCommPID(t *testing.T) {
	testkit.RequireKernel(t)
	fx := testkit.Fixture("follow_ticker")
	dir := t.TempDir()
	var procs [2]*exec.Cmd
	for i, name := range []string{"pk_tick_a", "pk_tick_b"} {
		link := filepath.Join(dir, name)
		if err := os.Symlink(fx, link); err != nil {
			t.Fatal(err)
		}
		// Alive past the four traces below, also under emulation (where
		// each took about 6 s); killed at the end.
		cmd := exec.Command(link, "300000")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs[i] = cmd
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	}
	pidA, pidB := procs[0].Process.Pid, procs[1].Process.Pid
	check := func(expr string, want int) {
		t.Helper()
		r := runTraceWithin(t, 15*time.Second, "--json", "-n", "50", "--filter", expr, fx+":follow:tick")
		if r.code != 0 {
			t.Fatalf("--filter %q: exit %d: %s", expr, r.code, r.errOut)
		}
		hits := decodeHits(t, r.out)
		if len(hits) != 50 {
			t.Fatalf("--filter %q: %d hits, want 50", expr, len(hits))
		}
		for _, h := range hits {
			if h.PID != want {
				t.Fatalf("--filter %q: a hit of pid %d, want only %d's", expr, h.PID, want)
			}
		}
	}
	check(`comm == "pk_tick_a"`, pidA)
	check(`comm == "pk_tick_b"`, pidB)
	check("pid == "+itoa(pidB), pidB)
	check(`comm == "pk_tick_*" && pid != `+itoa(pidB), pidA)
}

// A filter on a value the probe has not: a usage error.
func TestTraceFilterKindMismatch(t *testing.T) {
	if _, err := parseTrace([]string{"--filter", "ret == 1", "uprobe:x:f"}); err == nil || !strings.Contains(err.Error(), "a uretprobe has one value") {
		t.Errorf("ret on a uprobe: %v", err)
	}
}
