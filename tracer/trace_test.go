package tracer_test

import (
	"context"
	"errors"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/probe"
	"github.com/probekit/probekit/procmaps"
	"github.com/probekit/probekit/record"
	"github.com/probekit/probekit/tracer"
)

// bpfFDs counts this process's descriptors of BPF objects (links,
// programs, maps) and perf events (a uprobe without uprobe_multi).
func bpfFDs(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		target, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err == nil && (strings.HasPrefix(target, "anon_inode:bpf") || strings.HasPrefix(target, "anon_inode:[perf_event]")) {
			n++
		}
	}
	return n
}

// Start returns with every probe attached in a running fixture: its
// semaphore is raised at once. The fixture then fires sample:sizes 5
// times and sample:sema 3 times; the counts read while the trace runs
// (ModeCount: the kernel's map) and after Stop are exactly those, in
// both modes, and Stop leaves nothing attached: the semaphore is back
// to 0 and the BPF descriptors are those before Start. A second Stop
// returns the same.
func TestStartStop(t *testing.T) {
	testkit.RequireKernel(t)
	fixture := testkit.Fixture("usdt_sample")
	var specs []probe.Spec
	for _, name := range []string{"sizes", "sema"} {
		s, err := probe.Parse(fixture + ":sample:" + name)
		if err != nil {
			t.Fatal(err)
		}
		specs = append(specs, s)
	}
	for _, mode := range []record.Mode{record.ModeCount, record.ModeEvents} {
		p := testkit.Start(t, fixture)
		proc, err := tracer.OpenProcess(p.PID())
		if err != nil {
			t.Fatal(err)
		}
		sema := semaphoreOf(t, fixture, proc)
		before := bpfFDs(t)
		var warn testkit.Buffer
		cfg := &tracer.Config{Probes: specs, Process: proc, Mode: mode, Warnings: &warn}
		var onHit []string
		if mode == record.ModeEvents {
			cfg.OnHit = func(h *tracer.Hit) error {
				onHit = append(onHit, h.Site.Label)
				return nil
			}
		}
		tr, err := tracer.Start(context.Background(), cfg)
		if err != nil {
			t.Fatalf("mode %v: Start: %v", mode, err)
		}
		if v := sema(); v != 1 {
			tr.Stop()
			t.Fatalf("mode %v: semaphore %d when Start returned, want 1", mode, v)
		}
		if sites := tr.Sites(); len(sites) < 2 || !slices.ContainsFunc(sites, func(s tracer.Site) bool { return s.Label == "sample:sema" }) {
			t.Errorf("mode %v: sites %+v", mode, sites)
		}
		if hits := p.Fire("sizes", 5); len(hits) != 5 {
			t.Fatalf("fired %d", len(hits))
		}
		if hits := p.Fire("sema", 3); len(hits) != 3 || hits[0].Skipped {
			t.Fatalf("fired %+v, want 3 not skipped", hits)
		}
		want := []tracer.Count{{Probe: "sample:sizes", Hits: 5}, {Probe: "sample:sema", Hits: 3}}
		if mode == record.ModeCount {
			// Counted in the kernel as they fire: readable while the
			// trace runs.
			if got, err := tr.Counts(); err != nil || !slices.Equal(got, want) {
				t.Errorf("mode %v: live counts %v (%v), want %v", mode, got, err, want)
			}
		}
		if err := tr.Stop(); err != nil {
			t.Fatalf("mode %v: Stop: %v (%s)", mode, err, warn.String())
		}
		if got, err := tr.Counts(); err != nil || !slices.Equal(got, want) {
			t.Errorf("mode %v: counts after Stop %v (%v), want %v", mode, got, err, want)
		}
		if mode == record.ModeEvents && len(onHit) != 8 {
			t.Errorf("OnHit got %d hits, want 8: %v", len(onHit), onHit)
		}
		if v := sema(); v != 0 {
			t.Errorf("mode %v: semaphore %d after Stop, want 0", mode, v)
		}
		if n := bpfFDs(t); n != before {
			t.Errorf("mode %v: %d BPF descriptors after Stop, %d before Start", mode, n, before)
		}
		if err := tr.Stop(); err != nil {
			t.Errorf("mode %v: second Stop: %v", mode, err)
		}
		select {
		case <-tr.Done():
		default:
			t.Errorf("mode %v: Done not closed after Stop", mode)
		}
		p.Stop()
	}
}

// A trace whose command exits ends by itself: Wait returns the command's
// end, and the counts are final.
func TestStartWaitCommand(t *testing.T) {
	testkit.RequireKernel(t)
	fixture := testkit.Fixture("usdt_sample")
	spec, err := probe.Parse(fixture + ":sample:loop")
	if err != nil {
		t.Fatal(err)
	}
	tr, err := tracer.Start(context.Background(), &tracer.Config{
		Probes: []probe.Spec{spec}, Command: []string{fixture, "--loop", "loop", "7"}, Mode: record.ModeCount,
		Warnings: new(testkit.Buffer),
	})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-tr.Done():
	case <-time.After(20 * time.Second):
		tr.Stop()
		t.Fatal("the trace did not end with its command")
	}
	if err := tr.Wait(); err != nil {
		t.Fatal(err)
	}
	if got, err := tr.Counts(); err != nil || !slices.Equal(got, []tracer.Count{{Probe: "sample:loop", Hits: 7}}) {
		t.Errorf("counts %v (%v), want sample:loop 7", got, err)
	}
}

// semaphoreOf returns a reader of sample:sema's semaphore in proc.
func semaphoreOf(t *testing.T, fixture string, proc *procmaps.Process) func() uint16 {
	t.Helper()
	_, off := testkit.SymbolOffset(t, fixture, "sample_sema_semaphore")
	id, err := procmaps.IDOf(fixture)
	if err != nil {
		t.Fatal(err)
	}
	addr, err := proc.Address(id, off, procmaps.Write)
	if err != nil {
		t.Fatal(err)
	}
	return func() uint16 {
		v, err := testkit.ReadUint16(proc.PID, addr)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// A histogram's and a profile's final state, read after the trace
// ended with its command: the loop probe's 7 values in sample:loop's
// histogram, stack_paths' 1000 + 300 calls of leaf in the profile; the
// readings a mode does not make are refused.
func TestStartHistogramsProfile(t *testing.T) {
	testkit.RequireKernel(t)
	fixture := testkit.Fixture("usdt_sample")
	spec, err := probe.Parse(fixture + ":sample:loop")
	if err != nil {
		t.Fatal(err)
	}
	tr, err := tracer.Start(context.Background(), &tracer.Config{
		Probes: []probe.Spec{spec}, Command: []string{fixture, "--loop", "loop", "7"},
		Mode: record.ModeHist, HistValue: probe.Arg(1), Warnings: new(testkit.Buffer),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Wait(); err != nil {
		t.Fatal(err)
	}
	hists, err := tr.Histograms()
	if err != nil || len(hists) != 1 || hists[0].Probe != "sample:loop" {
		t.Fatalf("histograms %+v (%v)", hists, err)
	}
	var n uint64
	for _, c := range hists[0].Buckets {
		n += c
	}
	if n != 7 {
		t.Errorf("%d values in the histogram, want 7", n)
	}
	if counts, err := tr.Counts(); err != nil || !slices.Equal(counts, []tracer.Count{{Probe: "sample:loop", Hits: 7}}) {
		t.Errorf("counts %v (%v), want sample:loop 7", counts, err)
	}
	if _, err := tr.Profile(); !errors.Is(err, tracer.ErrMode) {
		t.Errorf("Profile of a histogram: %v, want ErrMode", err)
	}

	if runtime.GOARCH != "amd64" {
		return // stack_paths is built for x86-64
	}
	paths := testkit.Fixture("stack_paths")
	tr, err = tracer.Start(context.Background(), &tracer.Config{
		Probes:  []probe.Spec{{Kind: record.KindUprobe, Target: paths, Func: "leaf"}},
		Command: []string{paths, "1000", "300"}, Mode: record.ModeCount, Stack: true, FramePointers: true,
		Warnings: new(testkit.Buffer),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Wait(); err != nil {
		t.Fatal(err)
	}
	prof, err := tr.Profile()
	if err != nil {
		t.Fatal(err)
	}
	var calls int64
	for _, s := range prof.Sample {
		calls += s.Value[0]
	}
	if calls != 1300 {
		t.Errorf("%d calls in the profile, want 1300", calls)
	}
	if _, err := tr.Counts(); !errors.Is(err, tracer.ErrKeyed) {
		t.Errorf("Counts by stack: %v, want ErrKeyed", err)
	}
	if _, err := tr.Histograms(); !errors.Is(err, tracer.ErrMode) {
		t.Errorf("Histograms of counts: %v, want ErrMode", err)
	}
}

// An attach that fails at the second probe leaves nothing behind: the
// first probe's link and the collection are closed, and the command
// launched stopped for it is gone.
func TestStartAttachErrorReleases(t *testing.T) {
	testkit.RequireKernel(t)
	fixture := testkit.Fixture("usdt_sample")
	good, err := probe.Parse(fixture + ":sample:sizes")
	if err != nil {
		t.Fatal(err)
	}
	bad := good
	bad.Name = "no_such_probe"
	before := bpfFDs(t)
	tr, err := tracer.Start(context.Background(), &tracer.Config{
		Probes: []probe.Spec{good, bad}, Command: []string{fixture, "--loop", "sizes", "1"}, Warnings: new(testkit.Buffer),
	})
	if err == nil {
		tr.Stop()
		t.Fatal("Start attached a probe that does not exist")
	}
	if n := bpfFDs(t); n != before {
		t.Errorf("%d BPF descriptors after the failed Start, %d before", n, before)
	}
	if kids := children(t); len(kids) != 0 {
		t.Errorf("children left after the failed Start: %v", kids)
	}
}

// children returns the PIDs of this process's children.
func children(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	self := strconv.Itoa(os.Getpid())
	var out []string
	for _, e := range entries {
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, not ')'.
		s := string(stat)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) > 1 && fields[1] == self {
			out = append(out, e.Name())
		}
	}
	return out
}
