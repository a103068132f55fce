package tracer_test

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"runtime"
	"testing"

	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/probe"
	"github.com/probekit/probekit/record"
	"github.com/probekit/probekit/tracer"
)

// jitStack is the stack of a hit at stack_jit's leaf, as text: the
// JIT-like frame named from the process's perf map, between C frames.
var jitStack = regexp.MustCompile(`leaf\+0x0 \([^)]*stack_jit\)\n\s+0x[0-9a-f]+ jit_trampoline\+0x6 \((/tmp/perf-\d+\.map)\)\n\s+0x[0-9a-f]+ run_jit\+0x[0-9a-f]+ \([^)]*\)\n\s+0x[0-9a-f]+ main\+0x[0-9a-f]+ `)

// A JIT-like frame (testdata/stack_jit.c: code in an anonymous executable
// mapping, with a frame record and no CFI, named by a perf map) is walked
// through, by its frame record there and by CFI in the C code around it,
// to main, and named from /tmp/perf-PID.map: in printed stacks, and in
// stacks counted in the kernel and named after the command exited.
func TestStackThroughJIT(t *testing.T) {
	testkit.RequireKernel(t)
	if runtime.GOARCH != "amd64" {
		testkit.Unavailable(t, "stack_jit is built for x86-64")
	}
	fixture := testkit.Fixture("stack_jit")
	spec := probe.Spec{Kind: record.KindUprobe, Target: fixture, Func: "leaf"}
	keys, err := tracer.ParseKeys("stack")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		cfg  tracer.Config
		hits int
	}{
		{"printed", tracer.Config{Command: []string{fixture, "3"}}, 3},
		{"counted", tracer.Config{Command: []string{fixture, "5"}, Mode: record.ModeCount, Keys: keys}, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out bytes.Buffer
			cfg := c.cfg
			cfg.Probes, cfg.Stack, cfg.Output, cfg.Warnings = []probe.Spec{spec}, true, &out, new(bytes.Buffer)
			err := tracer.Run(context.Background(), &cfg)
			for _, m := range jitStack.FindAllStringSubmatch(out.String(), -1) {
				t.Cleanup(func() { os.Remove(m[1]) })
			}
			if err != nil {
				t.Fatalf("Run: %v (%s)", err, cfg.Warnings)
			}
			if n := len(jitStack.FindAllString(out.String(), -1)); n != c.hits {
				t.Errorf("%d stacks leaf, jit_trampoline, run_jit, main, want %d:\n%s", n, c.hits, out.String())
			}
		})
	}
}
