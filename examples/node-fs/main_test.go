package main

import (
	"context"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/probekit/probekit/internal/features"
	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/uprobe"
)

func TestMain(m *testing.M) { os.Exit(testkit.RunWithLeakCheck(m)) }

const node = "/usr/bin/node"

// requireNode skips (or fails under PROBEKIT_REQUIRE_KERNEL=1) without
// root or without node.
func requireNode(t *testing.T) {
	t.Helper()
	testkit.RequireKernel(t)
	if _, err := os.Stat(node); err != nil {
		testkit.Unavailable(t, "%s: %v", node, err)
	}
	// Without cookies the example refuses (TestRefusedWithoutCookies,
	// on every kernel).
	testkit.NeedFeature(t, uprobe.CheckCookies() == nil, nil, "5.15", "BPF cookie")
}

// traceNode runs node -e script through trace and returns every call.
func traceNode(t *testing.T, script string) []Call {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var calls []Call
	cmd := exec.Command(node, "-e", script)
	err := trace(ctx, cmd, func(c Call) { calls = append(calls, c) })
	if err != nil {
		t.Fatalf("trace: %v", err)
	}
	for _, c := range calls {
		if int(c.PID) != cmd.Process.Pid {
			t.Errorf("call from pid %d, traced %d: %+v", c.PID, cmd.Process.Pid, c)
		}
	}
	if ctx.Err() != nil {
		t.Fatal("trace did not return when node exited")
	}
	return calls
}

// find returns the calls of function fn on path (any path if "").
func find(calls []Call, fn, path string) []Call {
	var out []Call
	for _, c := range calls {
		if c.Function == fn && (path == "" || c.Path == path) {
			out = append(out, c)
		}
	}
	return out
}

// Synchronous calls (fs.*Sync): each uv_fs_* call is seen with its
// arguments and the result the function returned, and the calls on one
// file chain through its descriptor.
func TestTraceSync(t *testing.T) {
	requireNode(t)
	path := filepath.Join(t.TempDir(), "x")
	missing := path + ".missing"
	calls := traceNode(t, `const fs = require('fs');
fs.writeFileSync(`+"`"+path+"`"+`, 'hi');
fs.readFileSync(`+"`"+path+"`"+`);
try { fs.statSync(`+"`"+missing+"`"+`) } catch (e) {}`)
	if b, err := os.ReadFile(path); err != nil || string(b) != "hi" {
		t.Fatalf("node wrote %q, %v", b, err)
	}

	opens := find(calls, "uv_fs_open", path)
	if len(opens) != 2 {
		t.Fatalf("%d uv_fs_open calls on %s, want 2 (write, read); all calls: %+v", len(opens), path, calls)
	}
	w, r := opens[0], opens[1]
	if w.Flags != unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC || w.Result < 0 || w.Async {
		t.Errorf("open for writing: flags %#o, result %d, async %v", w.Flags, w.Result, w.Async)
	}
	if r.Flags != unix.O_RDONLY || r.Result < 0 || r.Async {
		t.Errorf("open for reading: flags %#o, result %d, async %v", r.Flags, r.Result, r.Async)
	}
	// The descriptor each open returned is the one written, read, closed.
	check := func(fn string, fd int, bytes uint64, result int) {
		t.Helper()
		for _, c := range find(calls, fn, "") {
			if c.FD == fd && c.Bytes == bytes && c.Result == result && !c.Async {
				return
			}
		}
		t.Errorf("no %s(fd %d, %d bytes) = %d in %+v", fn, fd, bytes, result, find(calls, fn, ""))
	}
	check("uv_fs_write", w.Result, 2, 2)
	check("uv_fs_close", w.Result, 0, 0)
	check("uv_fs_read", r.Result, 2, 2)
	check("uv_fs_close", r.Result, 0, 0)

	st := find(calls, "uv_fs_stat", missing)
	if len(st) != 1 || st[0].Result != -int(unix.ENOENT) {
		t.Fatalf("stat of the missing file: %+v, want one call = -ENOENT", st)
	}
	if got := format(st[0]); !strings.Contains(got, `"`+missing+`"`) || !strings.Contains(got, "= -2 ENOENT") {
		t.Errorf("format: %q", got)
	}
	for _, c := range calls {
		if c.Latency <= 0 {
			t.Errorf("%s: latency %v", c.Function, c.Latency)
		}
	}
}

// Calls with a callback only queue the request: their result is 0, and
// they are marked async.
func TestTraceAsync(t *testing.T) {
	requireNode(t)
	path := filepath.Join(t.TempDir(), "y")
	if err := os.WriteFile(path, []byte("abc"), 0o644); err != nil {
		t.Fatal(err)
	}
	calls := traceNode(t, "require('fs').open(`"+path+"`, 'r', (err, fd) => { if (err) throw err })")
	opens := find(calls, "uv_fs_open", path)
	if len(opens) != 1 || !opens[0].Async || opens[0].Result != 0 || opens[0].Flags != unix.O_RDONLY {
		t.Fatalf("uv_fs_open calls: %+v, want one queued O_RDONLY", opens)
	}
	if got := format(opens[0]); !strings.Contains(got, "queued") {
		t.Errorf("format: %q", got)
	}
}

// Every function of the table is exported by the node here, with the
// uv_fs_ prefix the glob selects.
func TestTableMatchesNode(t *testing.T) {
	ef, err := elf.Open(node)
	if err != nil {
		testkit.Unavailable(t, "%s: %v", node, err)
	}
	defer ef.Close()
	syms, err := ef.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	exported := map[string]bool{}
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Section != elf.SHN_UNDEF {
			exported[s.Name] = true
		}
	}
	seen := map[string]bool{}
	for i, f := range fsFunctions {
		if !exported[f.name] {
			t.Errorf("%s is not exported by %s", f.name, node)
		}
		if f.cb < 4 || f.cb > 7 {
			t.Errorf("%s: callback at argument %d, nodefs.c reads 4 to 7", f.name, f.cb)
		}
		if seen[f.name] {
			t.Errorf("%s listed twice", f.name)
		}
		seen[f.name] = true
		if c := cookieOf(i); c>>32 != uint64(i) || c&0xff != uint64(f.cb) {
			t.Errorf("cookieOf(%d) = %#x: index or callback lost", i, c)
		}
	}
}

// Without BPF cookies (before Linux 5.15; forced off here) the example
// refuses at once, naming the feature, and launches nothing.
func TestRefusedWithoutCookies(t *testing.T) {
	testkit.RequireKernel(t)
	defer features.ForceOff(features.Cookie)()
	cmd := exec.Command(node, "-e", "")
	err := trace(context.Background(), cmd, func(Call) {})
	if err == nil || !strings.Contains(err.Error(), "BPF cookie (Linux 5.15)") || cmd.Process != nil {
		t.Errorf("trace: %v (launched: %v); want a refusal naming BPF cookies", err, cmd.Process != nil)
	}
}
