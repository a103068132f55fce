package tracer_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/probekit/probekit/internal/features"
	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/probe"
	"github.com/probekit/probekit/profile"
	"github.com/probekit/probekit/record"
	"github.com/probekit/probekit/tracer"
	"github.com/probekit/probekit/usdt"
)

// A Go program's trace: Run launches the fixture, which fires
// sample:sizes three times, and OnHit gets each hit decoded, with the
// site it came from, in place of the printed lines.
func TestRunOnHit(t *testing.T) {
	testkit.RequireKernel(t)
	fixture := testkit.Fixture("usdt_sample")
	spec, err := probe.Parse(fixture + ":sample:sizes")
	if err != nil {
		t.Fatal(err)
	}
	type hit struct {
		site *tracer.Site
		pid  uint32
		args []int64
	}
	var hits []hit
	var out, warn bytes.Buffer
	cfg := &tracer.Config{
		Probes:   []probe.Spec{spec},
		Command:  []string{fixture, "--loop", "sizes", "3"},
		Output:   &out,
		Warnings: &warn,
		OnHit: func(h *tracer.Hit) error {
			hits = append(hits, hit{h.Site, h.PID, append([]int64(nil), h.Args[:h.NArgs]...)})
			return nil
		},
	}
	if err := tracer.Run(context.Background(), cfg); err != nil {
		t.Fatalf("Run: %v (warnings: %s)", err, warn.String())
	}
	if out.Len() != 0 {
		t.Errorf("OnHit set, yet lines were printed: %q", out.String())
	}
	f, err := usdt.Open(fixture)
	if err != nil {
		t.Fatal(err)
	}
	p, err := f.Find("sample", "sizes")
	if err != nil {
		t.Fatal(err)
	}
	want := testkit.Start(t, fixture).Fire("sizes", 3)
	if len(hits) != len(want) {
		t.Fatalf("%d hits, want %d", len(hits), len(want))
	}
	for i, h := range hits {
		s := h.site
		if s.Kind != record.KindUSDT || s.Provider != "sample" || s.Name != "sizes" || s.Label != "sample:sizes" ||
			s.Location == nil || s.Address != p.Locations[0].Address || h.pid == 0 {
			t.Errorf("hit %d: site %+v pid %d", i, s, h.pid)
		}
		if len(h.args) != len(want[i].Args) {
			t.Errorf("hit %d: %d values, want %d", i, len(h.args), len(want[i].Args))
			continue
		}
		for n, v := range h.args {
			if v != want[i].Args[n] {
				t.Errorf("hit %d value %d: %d, want %d", i, n, v, want[i].Args[n])
			}
		}
	}
}

// An error from OnHit ends the trace with that error.
func TestRunOnHitError(t *testing.T) {
	testkit.RequireKernel(t)
	fixture := testkit.Fixture("usdt_sample")
	spec, err := probe.Parse(fixture + ":sample:loop")
	if err != nil {
		t.Fatal(err)
	}
	stop := os.ErrClosed
	cfg := &tracer.Config{
		Probes:   []probe.Spec{spec},
		Command:  []string{fixture, "--loop", "loop", "3"},
		Warnings: new(bytes.Buffer),
		OnHit:    func(*tracer.Hit) error { return stop },
	}
	if err := tracer.Run(context.Background(), cfg); err != stop {
		t.Fatalf("Run: %v, want OnHit's error", err)
	}
}

// A Config that cannot be traced is refused before anything loads.
func TestRunRefusesConfig(t *testing.T) {
	testkit.RequireKernel(t) // the root check comes first
	spec := probe.Spec{Kind: record.KindUprobe, Target: "/bin/true", Func: "main"}
	for _, c := range []tracer.Config{
		{},
		{Probes: []probe.Spec{spec}, Follow: true},
		{Probes: []probe.Spec{spec}, Mode: record.ModeLatency},
		{Probes: []probe.Spec{spec}, Mode: record.ModeCount, OnHit: func(*tracer.Hit) error { return nil }},
		{Probes: []probe.Spec{spec}, Mode: record.ModeCount, OnProfile: func(*profile.Profile) error { return nil }},
	} {
		if err := tracer.Run(context.Background(), &c); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}

// A trace that ends before its command (here at Limit) ends the command
// too, with -f as without.
func TestRunEndsCommand(t *testing.T) {
	testkit.RequireKernel(t)
	fixture := testkit.Fixture("usdt_sample")
	spec, err := probe.Parse(fixture + ":sample:loop")
	if err != nil {
		t.Fatal(err)
	}
	for _, follow := range []bool{false, true} {
		var pid uint32
		cfg := &tracer.Config{
			Probes:   []probe.Spec{spec},
			Command:  []string{fixture, "--loop", "loop", "1000000000"},
			Follow:   follow,
			Limit:    1,
			Output:   io.Discard,
			Warnings: io.Discard,
			OnHit: func(h *tracer.Hit) error {
				pid = h.PID
				return nil
			},
		}
		if err := tracer.Run(context.Background(), cfg); err != nil {
			t.Fatalf("follow %v: Run: %v", follow, err)
		}
		if pid == 0 {
			t.Fatalf("follow %v: no hit", follow)
		}
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if _, err := os.Stat("/proc/" + strconv.Itoa(int(pid))); os.IsNotExist(err) {
				break
			}
			if time.Now().After(deadline) {
				syscall.Kill(int(pid), syscall.SIGKILL)
				t.Fatalf("follow %v: the command (pid %d) runs on after its trace", follow, pid)
			}
		}
	}
}

// Counted stacks handed to Go as a pprof profile: stack_paths 1000 300
// calls leaf from hot 1000 times and from cold 300 times.
func TestRunOnProfile(t *testing.T) {
	got := profileCounts(t, false)
	want := map[string]int64{
		"leaf;emit;hot;main;__libc_start_call_main":  1000,
		"leaf;emit;cold;main;__libc_start_call_main": 300,
	}
	if !maps.Equal(got, want) {
		t.Errorf("counted stacks %v, want %v", got, want)
	}
}

// With CFI the stacks are unwound inside BPF (bpfunwind's tables of the
// launched command, loaded at its entry point): libc's frames, which
// keep no frame pointer, down to _start.
func TestRunOnProfileCFI(t *testing.T) {
	got := profileCounts(t, true)
	const libc = ";__libc_start_call_main;__libc_start_main_impl;_start"
	want := map[string]int64{
		"leaf;emit;hot;main" + libc:  1000,
		"leaf;emit;cold;main" + libc: 300,
	}
	if !maps.Equal(got, want) {
		t.Errorf("counted stacks %v, want %v", got, want)
	}
}

// profileCounts traces stack_paths 1000 300 counting by stack at leaf
// (by CFI with cfi) and returns the profile's samples as functions,
// innermost first, joined by ";", to their counts.
func profileCounts(t *testing.T, cfi bool) map[string]int64 {
	t.Helper()
	testkit.RequireKernel(t)
	if runtime.GOARCH != "amd64" {
		testkit.Unavailable(t, "stack_paths is built for x86-64")
	}
	fixture := testkit.Fixture("stack_paths")
	keys, err := tracer.ParseKeys("stack")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	var got *profile.Profile
	cfg := &tracer.Config{
		Probes:        []probe.Spec{{Kind: record.KindUprobe, Target: fixture, Func: "leaf"}},
		Command:       []string{fixture, "1000", "300"},
		Mode:          record.ModeCount,
		Keys:          keys,
		Stack:         true,
		FramePointers: !cfi,
		Output:        &out,
		Warnings:      io.Discard,
		OnProfile: func(p *profile.Profile) error {
			got = p
			return nil
		},
	}
	if err := tracer.Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	if got == nil || out.Len() != 0 {
		t.Fatalf("profile %v, output %q", got, out.String())
	}
	counts := map[string]int64{}
	for _, s := range got.Sample {
		var names []string
		for _, l := range s.Location {
			for _, ln := range l.Line {
				names = append(names, ln.Function.Name)
			}
		}
		counts[strings.Join(names, ";")] += s.Value[0]
	}
	return counts
}

// Without BPF cookies (before Linux 5.15; forced off here) a trace of
// every process cannot attach a position-independent file path-wide: it
// watches the host and attaches in each process that maps the file, so
// a running fixture's hits arrive with their values.
func TestRunHostNoCookie(t *testing.T) {
	testkit.RequireKernel(t)
	defer features.ForceOff(features.Cookie)()
	fixture := testkit.Fixture("usdt_sample")
	spec, err := probe.Parse(fixture + ":sample:sizes")
	if err != nil {
		t.Fatal(err)
	}
	p := testkit.Start(t, fixture)
	var warn testkit.Buffer
	var args [][]int64
	var pids []uint32
	cfg := &tracer.Config{
		Probes:   []probe.Spec{spec},
		Limit:    3,
		Output:   io.Discard,
		Warnings: &warn,
		OnHit: func(h *tracer.Hit) error {
			pids = append(pids, h.PID)
			args = append(args, append([]int64(nil), h.Args[:h.NArgs]...))
			return nil
		},
	}
	done := make(chan error, 1)
	go func() { done <- tracer.Run(context.Background(), cfg) }()
	attached := fmt.Sprintf("attach %d ", p.PID())
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(warn.String(), attached); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("pid %d not attached within 10 s: %s", p.PID(), warn.String())
		}
	}
	want := p.Fire("sizes", 3)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v (%s)", err, warn.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not end at its limit")
	}
	if len(args) != len(want) {
		t.Fatalf("%d hits, want %d", len(args), len(want))
	}
	for i := range want {
		if pids[i] != uint32(p.PID()) || !slices.Equal(args[i], want[i].Args) {
			t.Errorf("hit %d: pid %d values %v, want pid %d values %v", i, pids[i], args[i], p.PID(), want[i].Args)
		}
	}
}

// Follow of a process that is this process's own child (a test's
// fixture, an agent's worker) traces it, and warns that this process must
// not wait for it meanwhile: its waits would take the child's trace stops.
func TestRunFollowOwnChildWarned(t *testing.T) {
	testkit.RequireKernel(t)
	fixture := testkit.Fixture("usdt_sample")
	spec, err := probe.Parse(fixture + ":sample:loop")
	if err != nil {
		t.Fatal(err)
	}
	p := testkit.Start(t, fixture)
	proc, err := tracer.OpenProcess(p.PID())
	if err != nil {
		t.Fatal(err)
	}
	var warn testkit.Buffer
	cfg := &tracer.Config{Probes: []probe.Spec{spec}, Process: proc, Follow: true, Limit: 1, Output: io.Discard, Warnings: &warn}
	done := make(chan error, 1)
	go func() { done <- tracer.Run(context.Background(), cfg) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Run: %v (%s)", err, warn.String())
			}
			if !strings.Contains(warn.String(), "is a child of this process") || !strings.Contains(warn.String(), "do not wait for it") {
				t.Errorf("warnings %q, want the own-child warning", warn.String())
			}
			return
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no hit within 30 s (%s)", warn.String())
		}
		if err := p.Loop("loop", 1); err != nil {
			t.Fatal(err)
		}
	}
}
