package bpfunwind_test

import (
	"os"
	"strconv"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/probekit/probekit/bpfunwind"
	"github.com/probekit/probekit/internal/safeelf"
	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/procmaps"
	"github.com/probekit/probekit/unwind"
)

// BenchmarkWalk is the BPF run time of one hit (prog-ns/hit, from the
// kernel's BPF statistics, BPF_STATS_RUN_TIME: Linux 5.8), at the entry
// of chain_end in the fixture built with frame pointers (stack_chain)
// and without (stack_chain_nofp): 10 frames down to _start either way.
// bare does nothing; fp_walk is the kernel's frame-pointer walk
// (bpf_get_stack, stack.bpf.h's probekit_user_stack), cfi_walk this
// package's (unwind.bpf.h); fp_count and cfi_count count by stack in
// the kernel with each. frames/hit is what the walk gave. Run:
//
//	go test -run '^$' -bench BenchmarkWalk -benchtime 100000x ./bpfunwind/
func BenchmarkWalk(b *testing.B) {
	stats, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
	if err != nil {
		testkit.Unavailable(b, "BPF statistics: %v", err)
	}
	defer stats.Close()
	for _, fx := range []string{"stack_chain", "stack_chain_nofp"} {
		for _, prog := range []string{"bare", "fp_walk", "cfi_walk", "fp_count", "cfi_count"} {
			b.Run(fx+"/"+prog, func(b *testing.B) {
				r := newRig(b, prog)
				path := testkit.Fixture(fx)
				p := testkit.Start(b, path)
				r.add(b, p.PID())
				r.attach(b, path, prog, p.PID(), "chain_end")
				before, err := r.coll.Programs[prog].Stats()
				if err != nil {
					b.Fatal(err)
				}
				b.ResetTimer()
				if err := p.Loop("chain", b.N); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				after, err := r.coll.Programs[prog].Stats()
				if err != nil {
					b.Fatal(err)
				}
				if n := after.RunCount - before.RunCount; n != uint64(b.N) {
					b.Fatalf("%d runs, want %d", n, b.N)
				}
				b.ReportMetric(float64(after.Runtime-before.Runtime)/float64(b.N), "prog-ns/hit")
				if v := r.coll.Variables["frames_seen"]; v != nil && (prog == "fp_walk" || prog == "cfi_walk") {
					var n uint64
					if err := v.Get(&n); err != nil {
						b.Fatal(err)
					}
					b.ReportMetric(float64(n)/float64(b.N), "frames/hit")
				}
			})
		}
	}
}

// BenchmarkBuild builds the rows of Debian's libc and python3.11:
// rows, table-bytes (the BPF map memory: RowSize per row) and the
// CFI rows they came from (spans).
func BenchmarkBuild(b *testing.B) {
	for _, path := range []string{"/lib/x86_64-linux-gnu/libc.so.6", "/usr/bin/python3.11", "/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so", "/usr/bin/node"} {
		b.Run(path, func(b *testing.B) {
			if _, err := os.Stat(path); err != nil {
				testkit.Unavailable(b, "%v (make deps)", err)
			}
			tab := loadTable(b, path)
			var rows []bpfunwind.Row
			for b.Loop() {
				var err error
				if rows, err = bpfunwind.Build(tab); err != nil {
					b.Fatal(err)
				}
			}
			spans := 0
			tab.Spans(func(unwind.Span) bool { spans++; return true })
			b.ReportMetric(float64(len(rows)), "rows")
			b.ReportMetric(float64(len(rows)*bpfunwind.RowSize), "table-bytes")
			b.ReportMetric(float64(spans), "spans")
		})
	}
}

// BenchmarkBuildHost builds the rows of every file that a process of
// this machine maps executable, as a host-wide trace would load them
// (each file once): rows and table-bytes are what the rows map would
// hold, files those with CFI. Run:
//
//	go test -run '^$' -bench BenchmarkBuildHost -benchtime 1x ./bpfunwind/
func BenchmarkBuildHost(b *testing.B) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		b.Fatal(err)
	}
	type file struct {
		p  *procmaps.Process
		ob procmaps.Object
	}
	seen := map[procmaps.FileID]file{}
	procs := 0
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		p, err := procmaps.Open(pid)
		if err != nil {
			continue
		}
		objs, err := p.Objects()
		if err != nil {
			continue
		}
		procs++
		for _, ob := range objs {
			for _, m := range ob.Mappings {
				if m.Perms&procmaps.Exec != 0 {
					seen[ob.ID()] = file{p, ob}
				}
			}
		}
	}
	for b.Loop() {
		rows, files := 0, 0
		for _, fl := range seen {
			f, err := fl.p.OpenObject(&fl.ob)
			if err != nil {
				continue
			}
			ef, err := safeelf.NewFile(f)
			var tab *unwind.Table
			if err == nil {
				tab, err = unwind.Load(ef)
			}
			f.Close()
			if err != nil {
				continue
			}
			r, err := bpfunwind.Build(tab)
			if err != nil {
				continue
			}
			rows += len(r)
			files++
		}
		b.ReportMetric(float64(procs), "processes")
		b.ReportMetric(float64(len(seen)), "objects")
		b.ReportMetric(float64(files), "files-with-rows")
		b.ReportMetric(float64(rows), "rows")
		b.ReportMetric(float64(rows*bpfunwind.RowSize), "table-bytes")
	}
}
