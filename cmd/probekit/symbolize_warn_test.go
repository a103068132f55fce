package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/probekit/probekit/internal/test/testkit"
)

// warnings returns the warning lines of a symbolize run's stderr, failing
// on any other line there.
func warnings(t *testing.T, stderr string) []string {
	t.Helper()
	var ws []string
	for _, l := range strings.Split(strings.TrimSuffix(stderr, "\n"), "\n") {
		if l == "" {
			continue
		}
		if !strings.HasPrefix(l, "probekit symbolize: warning: ") {
			t.Fatalf("stderr line %q is not a warning", l)
		}
		ws = append(ws, l)
	}
	return ws
}

// TestSymbolizeWarnsRefusedDebugFile: a stripped fixture whose
// .gnu_debuglink names a file of another build (its CRC-32 differs) gets
// one warning line on stderr naming the refused file, and its addresses
// are still symbolized with what is usable; with the right debug file there
// is no warning and the address gets its source line.
func TestSymbolizeWarnsRefusedDebugFile(t *testing.T) {
	dir := t.TempDir()
	fixtures := filepath.Join("..", "..", "testdata", "debuginfo", "bin")
	cp := func(from, to string) { testkit.CopyFile(t, filepath.Join(fixtures, from), filepath.Join(dir, to)) }
	cp("dbg_v5", "dbg_v5")
	cp("dbg_v4.debug", "dbg_v5.debug") // another build's
	obj := filepath.Join(dir, "dbg_v5")
	addr := fmt.Sprintf("%#x", testkit.FunctionValue(t, filepath.Join(fixtures, "dbg_v5.debug"), "main"))
	run1 := func() (string, string) {
		var out, errb bytes.Buffer
		if code := run([]string{"symbolize", "-e", obj, addr, addr}, &out, &errb); code != 0 {
			t.Fatalf("exit %d: %s", code, errb.String())
		}
		return out.String(), errb.String()
	}
	out, errs := run1()
	ws := warnings(t, errs)
	if len(ws) != 1 || !strings.Contains(ws[0], filepath.Join(dir, "dbg_v5.debug")) || !strings.Contains(ws[0], "does not match") {
		t.Fatalf("warnings %q, want one about %s not matching", ws, filepath.Join(dir, "dbg_v5.debug"))
	}
	// The stripped file has no symbol of main: only the refused file
	// could have named it.
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 || strings.Contains(out, "main") || strings.Contains(out, ".c:") {
		t.Fatalf("output %q, want two unnamed lines", out)
	}
	cp("dbg_v5.debug", "dbg_v5.debug")
	out, errs = run1()
	if ws := warnings(t, errs); len(ws) != 0 {
		t.Fatalf("warnings %q with the right debug file", ws)
	}
	if !strings.Contains(out, " main+0x0 ") || !strings.Contains(out, ".c:") {
		t.Fatalf("output %q, want main with its source line", out)
	}
}

// TestSymbolizeWarnsPerfMapRefused: a process of root whose
// /tmp/perf-PID.map belongs to nobody: the map is refused, its JIT code
// unnamed, and stderr has one warning line saying why, for two batches
// of addresses.
func TestSymbolizeWarnsPerfMapRefused(t *testing.T) {
	testkit.RequireKernel(t) // root: chown
	cmd, line := testkit.StartAs(t, 0, 20*time.Second, testkit.Python311(t), "-c", testkit.JITScript)
	var base uint64
	if _, err := fmt.Sscanf(line, "%x", &base); err != nil {
		t.Fatalf("%q: %v", line, err)
	}
	path := "/tmp/perf-" + strconv.Itoa(cmd.Process.Pid) + ".map"
	t.Cleanup(func() { os.Remove(path) })
	if err := os.WriteFile(path, fmt.Appendf(nil, "%x 100 not_its_name\n", base), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(path, testkit.NobodyUID, testkit.NobodyUID); err != nil {
		t.Fatal(err)
	}
	pw, out, errb, done := streamRun(t, "symbolize", "-p", strconv.Itoa(cmd.Process.Pid))
	a := fmt.Sprintf("%#x", base+8)
	fmt.Fprintln(pw, a)
	waitOutput(t, out, a)
	fmt.Fprintln(pw, a)
	pw.Close()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if strings.Contains(out.String(), "not_its_name") {
		t.Fatalf("named from a refused perf map: %q", out.String())
	}
	ws := warnings(t, errb.String())
	if len(ws) != 1 || !strings.Contains(ws[0], "perf map not read") || !strings.Contains(ws[0], "not owned by the process's user or root") {
		t.Fatalf("warnings %q, want one saying the perf map is not owned", ws)
	}
}
