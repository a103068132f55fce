package usdt_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/probekit/probekit/internal/features"
	"github.com/probekit/probekit/internal/test/bpftest"
	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/usdt"
)

// sitesPerFunction keeps each generated function small enough for gcc.
const sitesPerFunction = 500

// buildManySites compiles a program with one probe, bench:site, at n
// locations (each its own asm statement, so each its own note).
func buildManySites(b *testing.B, n int) string {
	b.Helper()
	dir := b.TempDir()
	src := filepath.Join(dir, "many.c")
	f, err := os.Create(src)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriter(f)
	fmt.Fprintln(w, "#include <sys/sdt.h>")
	for fn := 0; fn*sitesPerFunction < n; fn++ {
		fmt.Fprintf(w, "void f%d(long r) {\n", fn)
		for i := fn * sitesPerFunction; i < n && i < (fn+1)*sitesPerFunction; i++ {
			fmt.Fprintln(w, "\tSTAP_PROBE1(bench, site, r);")
		}
		fmt.Fprintln(w, "}")
	}
	fmt.Fprintln(w, "int main(void) { return 0; }")
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	f.Close()
	bin := filepath.Join(dir, "many")
	out, err := exec.Command("gcc", "-O1", "-o", bin, src).CombinedOutput()
	if err != nil {
		testkit.Unavailable(b, "cannot build the %d-site fixture: %v: %s", n, err, out)
	}
	return bin
}

// loadCount loads internal/test/bpftest's counting programs with an Attacher.
func loadCount(b *testing.B) (*usdt.Attacher, *ebpf.Collection) {
	b.Helper()
	spec, err := bpftest.LoadCount()
	if err != nil {
		b.Fatal(err)
	}
	if err := usdt.Prepare(spec); err != nil {
		b.Fatal(err)
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { coll.Close() })
	att, err := usdt.NewAttacher(spec, coll)
	if err != nil {
		b.Fatal(err)
	}
	return att, coll
}

// BenchmarkAttachDetach attaches one probe at every one of n sites, then
// closes the link: one uprobe_multi link, or one perf-event uprobe per
// site. Closing a perf-event uprobe waits for an RCU tasks-trace grace
// period (50-77 ms each on this kind of machine), so that path is measured at 100
// and 1,000 sites; 50,000 perf-event uprobes would take most of an hour
// and as many file descriptors.
func BenchmarkAttachDetach(b *testing.B) {
	testkit.RequireKernel(b)
	for _, c := range []struct {
		sites int
		perf  bool
	}{
		{1000, false}, {50000, false}, {100, true}, {1000, true},
	} {
		mode := "uprobe_multi"
		if c.perf {
			mode = "perf_event"
		}
		b.Run(fmt.Sprintf("sites=%d/%s", c.sites, mode), func(b *testing.B) {
			if c.perf {
				b.Cleanup(features.ForceOff(features.UprobeMulti))
			}
			bin := buildManySites(b, c.sites)
			att, coll := loadCount(b)
			prog := coll.Programs["count_hits"]
			// Parse once outside the timer: the cache serves the rest.
			if _, err := usdt.Open(bin); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				l, err := att.Attach(prog, bin, "bench", "site", nil)
				if err != nil {
					b.Fatal(err)
				}
				if n := len(l.Sites()); n != c.sites {
					b.Fatalf("%d sites attached, want %d", n, c.sites)
				}
				if err := l.Close(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(c.sites), "ns/site")
		})
	}
}

// BenchmarkHit measures what a probe hit costs the traced program: the
// fixture's loop mode fires sample:loop (4 arguments) b.N times with no
// program attached, with a program that only counts, and with one that
// reads the 4 arguments through bpf_usdt_arg. ns/op is per hit.
func BenchmarkHit(b *testing.B) {
	testkit.RequireKernel(b)
	att, coll := loadCount(b)
	p, err := testkit.StartProcess(testkit.Fixture("usdt_sample"))
	if err != nil {
		b.Fatal(err)
	}
	defer p.Stop()
	for _, prog := range []string{"", "count_hits", "count_args4"} {
		name := prog
		if name == "" {
			name = "no_probe"
		}
		b.Run(name, func(b *testing.B) {
			if prog != "" {
				l, err := att.Attach(coll.Programs[prog], testkit.Fixture("usdt_sample"), "sample", "loop", &usdt.Options{PID: p.PID()})
				if err != nil {
					b.Fatal(err)
				}
				defer l.Close()
			}
			var before uint64
			coll.Maps["counts"].Lookup(uint32(0), &before)
			b.ResetTimer()
			if err := p.Loop("loop", b.N); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			var after uint64
			coll.Maps["counts"].Lookup(uint32(0), &after)
			if want := uint64(b.N); prog != "" && after-before != want {
				b.Fatalf("program counted %d hits, want %d", after-before, want)
			}
		})
	}
}
