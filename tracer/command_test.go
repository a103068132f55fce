package tracer_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/probe"
	"github.com/probekit/probekit/tracer"
	"github.com/probekit/probekit/usdt"
)

// Config.Command runs what the shell would run: with a wrapper script
// of the fixture's name first on PATH and the fixture after it, the
// script runs (it leaves a mark), and the warning names the script and
// the fixture, which has the probe. The same for an ELF file without
// notes in the wrapper's place.
func TestRunCommandRunsWhatTheShellRuns(t *testing.T) {
	testkit.RequireKernel(t)
	fixture := testkit.Fixture("usdt_sample")
	name := filepath.Base(fixture)
	spec, err := probe.Parse(name + ":sample:loop")
	if err != nil {
		t.Fatal(err)
	}
	run := func(t *testing.T, dir string) (string, error) {
		t.Setenv("PATH", dir+string(os.PathListSeparator)+filepath.Dir(fixture)+string(os.PathListSeparator)+os.Getenv("PATH"))
		var warn bytes.Buffer
		err := tracer.Run(context.Background(), &tracer.Config{
			Probes:   []probe.Spec{spec},
			Command:  []string{name, "--loop", "loop", "2"},
			Follow:   true,
			Output:   new(bytes.Buffer),
			Warnings: &warn,
		})
		return warn.String(), err
	}

	t.Run("script", func(t *testing.T) {
		dir := t.TempDir()
		mark := filepath.Join(dir, "ran")
		script := filepath.Join(dir, name)
		if err := os.WriteFile(script, []byte("#!/bin/sh\necho \"$@\" > "+mark+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		warn, err := run(t, dir)
		if err != nil {
			t.Fatalf("Run: %v (warnings: %s)", err, warn)
		}
		if got, err := os.ReadFile(mark); err != nil || string(got) != "--loop loop 2\n" {
			t.Errorf("the script did not run: %q, %v", got, err)
		}
		if strings.Contains(warn, "saw no hit") {
			t.Errorf("warnings %q: a silent-probe hint beside the command's warning", warn)
		}
		if !strings.Contains(warn, "runs "+script+" ") || !strings.Contains(warn, "a script, not an ELF file") ||
			!strings.Contains(warn, fixture+" has sample:loop") {
			t.Errorf("warnings %q: want the script %s and the fixture %s named", warn, script, fixture)
		}
	})

	t.Run("elf", func(t *testing.T) {
		dir := t.TempDir()
		other := filepath.Join(dir, name)
		if err := os.Symlink(testkit.Fixture("func_args"), other); err != nil {
			t.Fatal(err)
		}
		// The file that runs has no notes: attaching in it fails, and
		// the warning before says which file has the probe.
		warn, err := run(t, dir)
		if !errors.Is(err, usdt.ErrNoProbes) || !strings.Contains(err.Error(), other) {
			t.Errorf("Run: %v, want usdt.ErrNoProbes naming %s", err, other)
		}
		if !strings.Contains(warn, "runs "+other+" ") || !strings.Contains(warn, "which has no probe sample:loop") ||
			!strings.Contains(warn, fixture+" has sample:loop") {
			t.Errorf("warnings %q: want %s and the fixture %s named", warn, other, fixture)
		}
	})
}
