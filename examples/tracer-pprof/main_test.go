package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	gprofile "github.com/google/pprof/profile"

	"github.com/probekit/probekit/internal/test/testkit"
)

func TestMain(m *testing.M) { os.Exit(testkit.RunWithLeakCheck(m)) }

// The fixture func_args calls malloc once a round from main: the profile
// holds those calls under the whole stack, malloc, main, then libc's
// start (go tool pprof -traces shows it so).
func TestProfileMallocs(t *testing.T) {
	testkit.RequireKernel(t)
	out := filepath.Join(t.TempDir(), "malloc.pprof")
	if err := profileMallocs(context.Background(), []string{testkit.Fixture("func_args"), "137"}, out); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	prof, err := gprofile.Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	var through, total int64
	for _, s := range prof.Sample {
		var chain []string
		for _, loc := range s.Location {
			for _, l := range loc.Line {
				if l.Function != nil {
					chain = append(chain, l.Function.Name)
				}
			}
		}
		total += s.Value[0]
		if i := slices.Index(chain, "main"); i > 0 && strings.Contains(chain[i-1], "malloc") && slices.Contains(chain[i:], "__libc_start_call_main") {
			through += s.Value[0]
		}
	}
	if through < 137 {
		t.Errorf("%d mallocs under main ... __libc_start_call_main, want at least 137 (%d samples, %d calls)", through, len(prof.Sample), total)
	}
}
