package tracer_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/probe"
	"github.com/probekit/probekit/record"
	"github.com/probekit/probekit/tracer"
)

// Arguments are numbered from 1 in Go as on the command line: Strs
// probe.Arg(1) reads count_char's first argument as a string, Hit.Str and
// Hit.Value of probe.Arg(N) return argument N, and a uretprobe's value is
// probe.Ret() only.
func TestRunHitArgNumbers(t *testing.T) {
	testkit.RequireKernel(t)
	fixture := testkit.Fixture("func_args")
	var warn bytes.Buffer
	type hit struct {
		kind     record.Kind
		str      string
		strOK    bool
		c, ret   int64
		cOK, bad bool
	}
	var hits []hit
	cfg := &tracer.Config{
		Probes: []probe.Spec{
			{Kind: record.KindUprobe, Target: fixture, Func: "count_char"},
			{Kind: record.KindUretprobe, Target: fixture, Func: "count_char"},
		},
		Command:  []string{fixture, "2"},
		Strs:     []probe.ArgNum{probe.Arg(1)},
		Warnings: &warn,
		OnHit: func(h *tracer.Hit) error {
			x := hit{kind: h.Kind}
			if h.Kind == record.KindUprobe {
				s, ok := h.Str(probe.Arg(1))
				x.str, x.strOK = string(s), ok
				x.c, x.cOK = h.Value(probe.Arg(2))
				_, x.bad = h.Value(probe.Ret())
			} else {
				x.ret, x.cOK = h.Value(probe.Ret())
				_, x.bad = h.Value(probe.Arg(1))
			}
			hits = append(hits, x)
			return nil
		},
	}
	if err := tracer.Run(context.Background(), cfg); err != nil {
		t.Fatalf("Run: %v (warnings: %s)", err, warn.String())
	}
	var entries, returns int
	for i, h := range hits {
		switch {
		case h.kind == record.KindUprobe && h.strOK && h.str == "probekit-func-args" && h.cOK && h.c == '-' && !h.bad:
			entries++
		case h.kind == record.KindUretprobe && h.cOK && h.ret == 2 && !h.bad:
			returns++
		default:
			t.Errorf("hit %d: %+v", i, h)
		}
	}
	if entries != 2 || returns != 2 {
		t.Errorf("%d entries and %d returns read right, want 2 and 2 (%d hits)", entries, returns, len(hits))
	}
}

// A 0-based habit written through probe.Arg is refused by name before
// anything loads: Arg(0), a return value as a string, HistValue outside
// ModeHist, ModeHist without HistValue.
func TestCompleteRefusesArgNumbers(t *testing.T) {
	spec := probe.Spec{Kind: record.KindUprobe, Target: "/bin/true", Func: "main"}
	for _, tc := range []struct {
		cfg  tracer.Config
		want string
	}{
		{tracer.Config{Probes: []probe.Spec{spec}, Strs: []probe.ArgNum{probe.Arg(0)}}, "Strs (--str): argument 0: arguments are numbered from 1"},
		{tracer.Config{Probes: []probe.Spec{spec}, Strs: []probe.ArgNum{probe.Ret()}}, "return value is not read as a string"},
		{tracer.Config{Probes: []probe.Spec{spec}, Strs: []probe.ArgNum{probe.Arg(1), probe.Arg(2), probe.Arg(3), probe.Arg(4), probe.Arg(5)}}, "5 string arguments, at most 4"},
		{tracer.Config{Probes: []probe.Spec{spec}, Mode: record.ModeHist}, "HistValue (--hist): no argument"},
		{tracer.Config{Probes: []probe.Spec{spec}, Mode: record.ModeHist, HistValue: probe.Arg(13)}, "HistValue (--hist): argument 13: want 1 to 12"},
		{tracer.Config{Probes: []probe.Spec{spec}, HistValue: probe.Arg(1)}, "set Mode to record.ModeHist"},
		{tracer.Config{Probes: []probe.Spec{spec}, Mode: record.ModeCount, Strs: []probe.ArgNum{probe.Arg(1)}}, "prints strings of hits"},
	} {
		if err := tc.cfg.Complete(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.cfg, err, tc.want)
		}
	}
	ok := tracer.Config{Probes: []probe.Spec{spec}, Mode: record.ModeHist, HistValue: probe.Arg(2)}
	if err := ok.Complete(); err != nil {
		t.Errorf("HistValue Arg(2): %v", err)
	}
}
