package tracer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/probekit/probekit/internal/features"
	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/probe"
	"github.com/probekit/probekit/tracer"
)

// stringsConfig traces the entries of testdata/params/strings.c's cold
// and raw over its given rounds.
func stringsConfig(t *testing.T, rounds int) *tracer.Config {
	t.Helper()
	if runtime.GOARCH != "amd64" {
		t.Skip("the fixture is built for x86-64")
	}
	fx := filepath.Join(testkit.Root(), "testdata", "params", "bin", "strings")
	var specs []probe.Spec
	for _, fn := range []string{"cold", "raw"} {
		s, err := probe.Parse("uprobe:" + fx + ":" + fn)
		if err != nil {
			t.Fatal(err)
		}
		specs = append(specs, s)
	}
	return &tracer.Config{Probes: specs, Command: []string{fx, fmt.Sprint(rounds)}, Warnings: new(strings.Builder)}
}

// coldLabels runs cfg and returns cold's label parameter at each hit.
func coldLabels(t *testing.T, cfg *tracer.Config) []tracer.Param {
	t.Helper()
	var got []tracer.Param
	cfg.OnHit = func(h *tracer.Hit) error {
		if ps := h.Params(); h.Site.Function == "cold" && len(ps) == 2 {
			got = append(got, ps[1])
		}
		return nil
	}
	if err := tracer.Run(context.Background(), cfg); err != nil {
		t.Fatalf("Run: %v (%s)", err, cfg.Warnings)
	}
	return got
}

// A const char * argument pointing into a page the process has not
// mapped at the call (strings.c drops cold_label's page before each
// call: every hit is a first hit) reads as its string where the kernel
// runs sleepable uprobe programs, the read faulting the page in; with the
// faulting read off it prints <unreadable: not resident>, never the
// pointer. Forced off, the test also proves the page is cold: a resident
// page would read.
func TestKernelColdString(t *testing.T) {
	testkit.RequireKernel(t)
	const rounds = 3
	t.Run("faulting", func(t *testing.T) {
		ok, err := features.Have(features.SleepableUprobe)
		testkit.NeedFeature(t, ok, err, features.SleepableUprobe.Since(), features.SleepableUprobe.String())
		got := coldLabels(t, stringsConfig(t, rounds))
		if len(got) != rounds {
			t.Fatalf("%d hits of cold, want %d: %+v", len(got), rounds, got)
		}
		for r, p := range got {
			if p.Value != "cold-rodata" || p.Text != `"cold-rodata"` {
				t.Errorf("round %d: label %#v (%s), want \"cold-rodata\"", r, p.Value, p.Text)
			}
		}
	})
	t.Run("forced-off", func(t *testing.T) {
		defer features.ForceOff(features.SleepableUprobe)()
		got := coldLabels(t, stringsConfig(t, rounds))
		if len(got) != rounds {
			t.Fatalf("%d hits of cold, want %d: %+v", len(got), rounds, got)
		}
		for r, p := range got {
			u, ok := p.Value.(tracer.Unreadable)
			if !ok || u.Address == 0 || u.Reason != tracer.NotResident || p.Text != "<unreadable: not resident>" {
				t.Errorf("round %d: label %#v (%s), want Unreadable, <unreadable: not resident>", r, p.Value, p.Text)
			}
		}
		// The JSON line says so too, and stays JSON.
		cfg := stringsConfig(t, 1)
		cfg.JSON = true
		var out strings.Builder
		cfg.Output = &out
		if err := tracer.Run(context.Background(), cfg); err != nil {
			t.Fatalf("Run: %v (%s)", err, cfg.Warnings)
		}
		var hit struct {
			Function string
			Params   []struct {
				Name  string
				Value json.RawMessage
			}
		}
		line, _, _ := strings.Cut(out.String(), "\n")
		if err := json.Unmarshal([]byte(line), &hit); err != nil || hit.Function != "cold" || len(hit.Params) != 2 {
			t.Fatalf("JSON line %s: %+v, %v", line, hit, err)
		}
		var v struct {
			Unreadable, Address string
		}
		if err := json.Unmarshal(hit.Params[1].Value, &v); err != nil || v.Unreadable != "not resident" || !strings.HasPrefix(v.Address, "0x") {
			t.Errorf("label %s, want {\"unreadable\":\"not resident\",\"address\":\"0x...\"}", hit.Params[1].Value)
		}
	})
}

// Bytes the traced program controls never reach the terminal raw: raw's
// string argument "x\x1b[2Jy\xffz" and the comm "c\x1b[2Jm\xff\nz" print
// escaped on one line of text (--time shows the comm), and JSON lines
// stay JSON (invalid UTF-8 as U+FFFD, the escape as \u001b).
func TestKernelEscapedStrings(t *testing.T) {
	testkit.RequireKernel(t)
	cfg := stringsConfig(t, 2)
	cfg.Time = true
	var out strings.Builder
	cfg.Output = &out
	if err := tracer.Run(context.Background(), cfg); err != nil {
		t.Fatalf("Run: %v (%s)", err, cfg.Warnings)
	}
	text := out.String()
	if strings.ContainsAny(text, "\x1b\xff") {
		t.Errorf("raw escape bytes in the output:\n%q", text)
	}
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	var raws int
	for _, l := range lines {
		if !strings.Contains(l, " c\\x1b[2Jm\\xff\\nz ") {
			t.Errorf("comm not escaped, or the line split: %q", l)
		}
		if strings.Contains(l, "raw(") {
			raws++
			if !strings.Contains(l, `text="x\x1b[2Jy\xffz"`) {
				t.Errorf("raw's line %q, want text=\"x\\x1b[2Jy\\xffz\"", l)
			}
		}
	}
	if len(lines) != 4 || raws != 2 {
		t.Errorf("%d lines, %d of raw, want 4 and 2:\n%s", len(lines), raws, text)
	}

	cfg = stringsConfig(t, 1)
	cfg.JSON = true
	out.Reset()
	cfg.Output = &out
	if err := tracer.Run(context.Background(), cfg); err != nil {
		t.Fatalf("Run: %v (%s)", err, cfg.Warnings)
	}
	var raw int
	for _, l := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
		var hit struct {
			Function, Comm string
			Params         []struct{ Value any }
		}
		if err := json.Unmarshal([]byte(l), &hit); err != nil {
			t.Fatalf("not JSON: %q: %v", l, err)
		}
		if hit.Comm != "c\x1b[2Jm\ufffd\nz" {
			t.Errorf("comm %q", hit.Comm)
		}
		if hit.Function == "raw" {
			raw++
			if len(hit.Params) != 2 || hit.Params[1].Value != "x\x1b[2Jy\ufffdz" {
				t.Errorf("raw's params %+v", hit.Params)
			}
		}
	}
	if raw != 1 {
		t.Errorf("%d hits of raw, want 1:\n%s", raw, out.String())
	}
}
