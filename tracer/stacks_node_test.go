package tracer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/probe"
	"github.com/probekit/probekit/procmaps"
	"github.com/probekit/probekit/record"
	"github.com/probekit/probekit/tracer"
)

// nodeScript calls fs.statSync (libuv's uv_fs_stat in the node binary)
// from outer, every 10 ms, for a minute at most.
const nodeScript = `const fs = require("fs");
function outer() { for (let i = 0; i < 200; i++) fs.statSync("/"); }
const end = Date.now() + 60000;
function tick() { outer(); if (Date.now() < end) setTimeout(tick, 10); }
tick();
`

// --stack through Node's JIT code: with --perf-basic-prof, V8 names its
// compiled functions in /tmp/perf-PID.map, and the walk steps through
// them by frame pointers: the stack at uv_fs_stat holds outer, named
// from the perf map, and goes on to the native frames below it.
func TestKernelStackNodePerfMap(t *testing.T) {
	testkit.RequireKernel(t)
	if runtime.GOARCH != "amd64" {
		testkit.Unavailable(t, "the CFI walk is x86-64's")
	}
	const node = "/usr/bin/node"
	if _, err := os.Stat(node); err != nil {
		testkit.Unavailable(t, "no %s", node)
	}
	script := filepath.Join(t.TempDir(), "app.js")
	if err := os.WriteFile(script, []byte(nodeScript), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node, "--perf-basic-prof", script)
	cmd.Dir = t.TempDir() // V8 writes its isolate-*-v8.log there
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
		os.Remove(fmt.Sprintf("/tmp/perf-%d.map", cmd.Process.Pid))
	}()
	proc, err := procmaps.Open(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	// Give V8 time to compile outer and write its map.
	time.Sleep(500 * time.Millisecond)
	var out, warn testkit.Buffer
	cfg := &tracer.Config{Probes: []probe.Spec{{Kind: record.KindUprobe, Target: node, Func: "uv_fs_stat"}},
		Process: proc, Stack: true, JSON: true, Limit: 20, Output: &out, Warnings: &warn}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	if err := tracer.Run(ctx, cfg); err != nil {
		t.Fatalf("Run: %v (%s)", err, warn.String())
	}
	perfMap := fmt.Sprintf("/tmp/perf-%d.map", proc.PID)
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var h stackHit
		if err := json.Unmarshal([]byte(l), &h); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		for i, f := range h.Stack {
			if f.Object == perfMap && strings.HasPrefix(f.Function, "JS:") && strings.Contains(f.Function, "outer "+script) {
				if i+1 >= len(h.Stack) || h.Truncated != "" {
					t.Errorf("the walk ended at outer (%q):\n%s", h.Truncated, showFrames(h.Stack))
				}
				return
			}
		}
	}
	t.Errorf("no stack with outer named from %s:\n%s\n%s", perfMap, out.String(), warn.String())
}
