package main

import (
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/probekit/probekit/internal/test/testkit"
)

// nmText returns the "address name" pairs nm --defined-only lists with
// the given type letters.
func nmText(t *testing.T, path, letters string) map[string]bool {
	t.Helper()
	out, err := exec.Command("nm", "--defined-only", path).Output()
	if err != nil {
		testkit.Unavailable(t, "nm: %v", err)
	}
	set := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.SplitN(line, " ", 3) // Go names contain spaces
		if len(f) == 3 && strings.Contains(letters, f[1]) {
			set[f[0]+" "+f[2]] = true
		}
	}
	return set
}

// listed returns the "address name" pairs of a listing, checking each
// line's shape: 16 hex digits of address and of size, the table padded
// to 10 columns, the name.
func listed(t *testing.T, out string) map[string]bool {
	t.Helper()
	set := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		// Fixed columns, then the name, which may contain spaces.
		if len(line) < 46 || line[16] != ' ' || line[33] != ' ' || line[44] != ' ' {
			t.Fatalf("bad line %q", line)
		}
		f := []string{line[:16], line[17:33], strings.TrimSpace(line[34:44]), line[45:]}
		if !strings.HasPrefix(f[2], ".") {
			t.Fatalf("bad line %q", line)
		}
		for _, hex := range f[:2] {
			if _, err := strconv.ParseUint(hex, 16, 64); err != nil {
				t.Fatalf("bad line %q: %v", line, err)
			}
		}
		set[f[0]+" "+f[3]] = true
	}
	return set
}

// TestListFunctionsNm: the listing is nm's: every function nm shows in a
// text section (T, t), and nothing nm does not show as code or weak.
func TestListFunctionsNm(t *testing.T) {
	for _, fixture := range []string{"usdt_sample", "malloc_user", "goprog"} {
		path := testkit.Fixture(fixture)
		code, out, stderr := runCmd("list", "--functions", path)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", fixture, code, stderr)
		}
		got := listed(t, out)
		for k := range nmText(t, path, "Tt") {
			if !got[k] {
				t.Errorf("%s: nm lists %s, probekit does not", fixture, k)
			}
		}
		code4 := nmText(t, path, "TtWw")
		for k := range got {
			if !code4[k] {
				t.Errorf("%s: probekit lists %s, nm has no such code symbol", fixture, k)
			}
		}
	}
}

func TestListFunctionsGlob(t *testing.T) {
	path := testkit.Fixture("malloc_user")
	code, out, stderr := runCmd("list", "--functions", path, "*_round")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	got := listed(t, out)
	if len(got) == 0 {
		t.Fatal("no function matches *_round")
	}
	for k := range got {
		if !strings.HasSuffix(k, "_round") {
			t.Errorf("glob matched %s", k)
		}
	}
	code, _, stderr = runCmd("list", "--functions", path, "no_such_*")
	if code != 1 || !strings.Contains(stderr, path) || !strings.Contains(stderr, "no_such_*") || !strings.Contains(stderr, "not found") {
		t.Errorf("no match: exit %d: %s", code, stderr)
	}
}

func TestListFunctionsJSON(t *testing.T) {
	path := testkit.Fixture("malloc_user")
	code, out, stderr := runCmd("list", "--functions", "--json", path, "main")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var doc struct {
		Path      string           `json:"path"`
		Machine   string           `json:"machine"`
		Functions []map[string]any `json:"functions"`
	}
	dec := json.NewDecoder(strings.NewReader(out))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if doc.Path != path || doc.Machine != "x86_64" || len(doc.Functions) != 1 {
		t.Fatalf("doc %s %s %d functions", doc.Path, doc.Machine, len(doc.Functions))
	}
	fn := doc.Functions[0]
	if fn["name"] != "main" || fn["source"] != ".symtab" {
		t.Errorf("function %v", fn)
	}
	for _, k := range []string{"address", "offset", "size"} {
		n, ok := fn[k].(json.Number)
		if _, err := n.Int64(); !ok || err != nil {
			t.Errorf("%s = %#v, want an integer", k, fn[k])
		}
	}
	// The address is st_value, as nm shows it.
	addr, _ := fn["address"].(json.Number).Int64()
	if nm := nmText(t, path, "T"); !nm[strings.Repeat("0", 16-len(strconv.FormatInt(addr, 16)))+strconv.FormatInt(addr, 16)+" main"] {
		t.Errorf("main at %#x, nm says otherwise", addr)
	}
	if _, ok := fn["version"]; ok {
		t.Error("version present on an unversioned function")
	}

	libc := "/usr/lib/x86_64-linux-gnu/libc.so.6"
	if _, err := os.Stat(libc); err != nil {
		return
	}
	code, out, stderr = runCmd("list", "--functions", "--json", "libc.so.6", "malloc")
	if code != 0 {
		t.Fatalf("libc: exit %d: %s", code, stderr)
	}
	if !strings.Contains(out, `"version": "GLIBC_2.2.5"`) || !strings.Contains(out, `"default_version": true`) || !strings.Contains(out, `"path": "libc.so.6"`) {
		t.Errorf("libc malloc:\n%s", out)
	}
}

func TestListFunctionsErrors(t *testing.T) {
	dir := t.TempDir()
	text := filepath.Join(dir, "script")
	if err := os.WriteFile(text, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{text, filepath.Join(dir, "missing"), dir} {
		code, _, stderr := runCmd("list", "--functions", target)
		if code != 1 || !strings.Contains(stderr, target) {
			t.Errorf("%s: exit %d: %s", target, code, stderr)
		}
	}
	if code, _, stderr := runCmd("list", "--functions"); code != 2 {
		t.Errorf("no target: exit %d: %s", code, stderr)
	}

	// A FIFO is refused at once: opening it for reading would wait for a
	// writer.
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	type result struct {
		code   int
		stderr string
	}
	done := make(chan result, 1)
	go func() {
		code, _, stderr := runCmd("list", "--functions", fifo)
		done <- result{code, stderr}
	}()
	select {
	case r := <-done:
		if r.code != 1 || !strings.Contains(r.stderr, fifo) || !strings.Contains(r.stderr, "FIFO") && !strings.Contains(r.stderr, "regular") {
			t.Errorf("FIFO: exit %d: %s", r.code, r.stderr)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("list --functions blocked on a FIFO")
	}
}

// TestListFunctionsProcess: -p PID lists a target as the process sees it,
// and with "*" every object it maps.
func TestListFunctionsProcess(t *testing.T) {
	fx := testkit.Start(t, testkit.Fixture("malloc_user"))
	pid := strconv.Itoa(fx.PID())
	code, out, stderr := runCmd("list", "--functions", "-p", pid, "malloc_user", "main")
	if code != 0 || len(listed(t, out)) != 1 {
		t.Fatalf("exit %d: %s%s", code, out, stderr)
	}
	code, out, stderr = runCmd("list", "--functions", "--json", "-p", pid, "*", "malloc")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var doc struct {
		PID     int `json:"pid"`
		Objects []struct {
			Path      string           `json:"path"`
			Functions []map[string]any `json:"functions"`
		} `json:"objects"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	found := false
	for _, o := range doc.Objects {
		if strings.Contains(o.Path, "libc.so") && len(o.Functions) > 0 && o.Functions[0]["name"] == "malloc" {
			found = true
		}
	}
	if doc.PID != fx.PID() || !found {
		t.Errorf("objects: %s", out)
	}
	code, out, _ = runCmd("list", "--functions", "-p", pid, "*", "malloc")
	if code != 0 || !strings.Contains(out, "libc.so") || !strings.Contains(out, " malloc@@GLIBC_2.2.5\n") {
		t.Errorf("text: exit %d:\n%s", code, out)
	}
	if code, _, stderr := runCmd("list", "--functions", "-p", pid, "*", "no_such_fn"); code != 1 || !strings.Contains(stderr, "no_such_fn") {
		t.Errorf("no match: exit %d: %s", code, stderr)
	}
}

// BenchmarkListFunctions: the listing of Node's functions in-process,
// output discarded (the whole process is measured with farm-bench).
func BenchmarkListFunctions(b *testing.B) {
	const node = "/usr/bin/node"
	if _, err := os.Stat(node); err != nil {
		b.Skipf("%s absent: %v", node, err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if code := run([]string{"list", "--functions", node}, io.Discard, io.Discard); code != 0 {
			b.Fatalf("exit %d", code)
		}
	}
}
