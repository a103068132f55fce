package tracer_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	gprofile "github.com/google/pprof/profile"
	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/probe"
	"github.com/probekit/probekit/record"
	"github.com/probekit/probekit/tracer"
)

// Stack with ModeCount counts by stack, and Pprof writes those stacks,
// whole, to the file, printing no table: stack_paths 1000 300 calls leaf
// from hot 1000 times and from cold 300 times.
func TestRunCountStackPprof(t *testing.T) {
	testkit.RequireKernel(t)
	if runtime.GOARCH != "amd64" {
		testkit.Unavailable(t, "stack_paths is built for x86-64")
	}
	fixture := testkit.Fixture("stack_paths")
	file := filepath.Join(t.TempDir(), "leaf.pprof")
	var out bytes.Buffer
	cfg := &tracer.Config{
		Probes:   []probe.Spec{{Kind: record.KindUprobe, Target: fixture, Func: "leaf"}},
		Command:  []string{fixture, "1000", "300"},
		Mode:     record.ModeCount,
		Stack:    true,
		Pprof:    file,
		Output:   &out,
		Warnings: io.Discard,
	}
	if err := tracer.Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	if out.Len() != 0 {
		t.Errorf("Pprof printed the stacks too:\n%s", out.String())
	}
	if len(cfg.Keys) != 0 {
		t.Errorf("Run changed the caller's Keys: %v", cfg.Keys)
	}
	f, err := os.Open(file)
	if err != nil {
		t.Fatalf("Pprof wrote no file: %v", err)
	}
	defer f.Close()
	prof, err := gprofile.Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	// Each sample's locations, innermost first, each location's lines
	// innermost (inlined) first: the whole chain of functions.
	counts := map[string]int64{}
	for _, s := range prof.Sample {
		var chain []string
		for _, loc := range s.Location {
			for _, l := range loc.Line {
				if l.Function != nil {
					chain = append(chain, l.Function.Name)
				}
			}
		}
		counts[strings.Join(chain, ";")] += s.Value[0]
	}
	for _, p := range []struct {
		count int64
		chain string
	}{
		{1000, "leaf;emit;hot;main;__libc_start_call_main"},
		{300, "leaf;emit;cold;main;__libc_start_call_main"},
	} {
		var got int64
		for chain, n := range counts {
			if chain == p.chain || strings.HasPrefix(chain, p.chain+";") {
				got += n
			}
		}
		if got != p.count {
			t.Errorf("%d samples with stack %s, want %d; samples: %v", got, p.chain, p.count, counts)
		}
	}
}

// Complete adds the stack key of Stack with ModeCount once, after Keys,
// and refuses what the command line refuses.
func TestConfigComplete(t *testing.T) {
	pid, err := tracer.ParseKeys("pid")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cfg  tracer.Config
		keys string // "": refused
	}{
		{tracer.Config{Mode: record.ModeCount, Stack: true}, "stack"},
		{tracer.Config{Mode: record.ModeCount, Stack: true, Keys: pid}, "pid,stack"},
		{tracer.Config{Mode: record.ModeCount, Stack: true, Pprof: "f"}, "stack"},
		{tracer.Config{Mode: record.ModeCount, Stack: true, Pprof: "f", StackTable: true}, "stack"},
		{tracer.Config{Mode: record.ModeCount, Pprof: "f"}, ""},
		{tracer.Config{Mode: record.ModeCount, Folded: true}, ""},
		{tracer.Config{Stack: true, Pprof: "f"}, ""},
		{tracer.Config{Mode: record.ModeCount, Stack: true, StackTable: true}, ""},
		{tracer.Config{Mode: record.ModeHist, Stack: true}, ""},
		{tracer.Config{Mode: record.ModeLatency, Stack: true}, ""},
	} {
		cfg := c.cfg
		err := cfg.Complete()
		if c.keys == "" {
			if err == nil {
				t.Errorf("%+v: accepted", c.cfg)
			}
			continue
		}
		if err != nil {
			t.Errorf("%+v: %v", c.cfg, err)
			continue
		}
		if err := cfg.Complete(); err != nil {
			t.Errorf("%+v: again: %v", c.cfg, err)
		}
		var names []string
		for _, k := range cfg.Keys {
			names = append(names, k.Name)
		}
		if got := strings.Join(names, ","); got != c.keys {
			t.Errorf("%+v: keys %s, want %s", c.cfg, got, c.keys)
		}
	}
	if len(pid) != 1 {
		t.Errorf("Complete grew the caller's Keys: %v", pid)
	}
}
