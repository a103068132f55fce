package symbolize

import (
	"debug/elf"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/probekit/probekit/internal/test/testkit"
)

const nodeBin = "/usr/bin/node"

// randomAddrs returns n addresses inside random sized functions of path.
func randomAddrs(tb testing.TB, path string, n int) []uint64 {
	if _, err := os.Stat(path); err != nil {
		testkit.Unavailable(tb, "%v", err)
	}
	fs := nmFuncs(tb, path)
	rng := rand.New(rand.NewPCG(3, 4))
	addrs := make([]uint64, n)
	for i := range addrs {
		f := fs[rng.IntN(len(fs))]
		addrs[i] = f.addr + rng.Uint64N(f.size)
	}
	return addrs
}

// BenchmarkFileWarm: one lookup of a link-time address of libjvm.so in a
// table already read (ns/op is per address).
func BenchmarkFileWarm(b *testing.B) {
	for _, dem := range []bool{false, true} {
		name := "plain"
		if dem {
			name = "demangle"
		}
		b.Run(name, func(b *testing.B) {
			addrs := randomAddrs(b, libjvm, 4096)
			f, err := New(&Options{Demangle: dem}).File(libjvm)
			if err != nil {
				b.Fatal(err)
			}
			for _, a := range addrs { // warm the demangled names
				f.Frame(a)
			}
			b.ReportAllocs()
			b.ResetTimer()
			i := 0
			for b.Loop() {
				if f.Frame(addrs[i&4095]).Function == "" {
					b.Fatal("unnamed")
				}
				i++
			}
		})
	}
}

// BenchmarkFileWarmParallel: the same from every CPU at once (lookups
// take no lock).
func BenchmarkFileWarmParallel(b *testing.B) {
	addrs := randomAddrs(b, libjvm, 4096)
	f, err := New(nil).File(libjvm)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			f.Frame(addrs[i&4095])
			i++
		}
	})
}

// BenchmarkProcessWarm: runtime addresses of a live node process (its
// executable is not PIE, so nm's addresses are runtime ones), in batches
// of 1024 as a stack or a sample buffer would come; ns/addr is per
// address, the process's liveness check included once per batch.
func BenchmarkProcessWarm(b *testing.B) {
	addrs := randomAddrs(b, nodeBin, 1024)
	cmd, _, _ := startNode(b)
	p, err := New(nil).Process(cmd.Process.Pid)
	if err != nil {
		b.Fatal(err)
	}
	frames, err := p.SymbolizeInto(make([]Frame, 0, 4*len(addrs)), addrs)
	if err != nil {
		b.Fatal(err)
	}
	if frames[0].Function == "" {
		b.Fatalf("%#x not named: %+v", addrs[0], frames[0])
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if frames, err = p.SymbolizeInto(frames[:0], addrs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(addrs)), "ns/addr")
}

// BenchmarkFirst: the first symbolization of a large file: opening it,
// reading its tables and naming one address.
func BenchmarkFirst(b *testing.B) {
	for _, c := range []struct{ name, path string }{{"libjvm", libjvm}, {"node", nodeBin}} {
		b.Run(c.name, func(b *testing.B) {
			addrs := randomAddrs(b, c.path, 1)
			b.ReportAllocs()
			for b.Loop() {
				f, err := New(nil).File(c.path)
				if err != nil {
					b.Fatal(err)
				}
				if f.Frame(addrs[0]).Function == "" {
					b.Fatal("unnamed")
				}
			}
		})
	}
}

// BenchmarkFirstProcess: the first symbolization of an address in a live
// node process by a new Symbolizer: its maps, node's tables, the name.
func BenchmarkFirstProcess(b *testing.B) {
	addrs := randomAddrs(b, nodeBin, 1)
	cmd, _, _ := startNode(b)
	b.ReportAllocs()
	for b.Loop() {
		p, err := New(nil).Process(cmd.Process.Pid)
		if err != nil {
			b.Fatal(err)
		}
		frames, err := p.Symbolize(addrs)
		if err != nil || frames[0].Function == "" {
			b.Fatal(frames, err)
		}
	}
}

// BenchmarkFileWarmLines: warm lookups of random libc addresses with
// libc6-dbg's DWARF (file:line and inline chains) into a reused slice:
// from the DWARF (NoIndex), from the line index a first File built, and
// against the same File without debug information (NoDebugInfo);
// cpu-ns/op is the lookup's CPU time.
func BenchmarkFileWarmLines(b *testing.B) {
	ef, err := elf.Open(libcPath)
	if err != nil {
		b.Skip(err)
	}
	text := ef.Section(".text")
	ef.Close()
	rng := rand.New(rand.NewPCG(1, 1))
	addrs := make([]uint64, 4096)
	for i := range addrs {
		addrs[i] = text.Addr + rng.Uint64N(text.Size)
	}
	cache := b.TempDir()
	if _, err := New(&Options{IndexDir: cache}).File(libcPath); err != nil { // the index built
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		opts *Options
	}{{"lines", &Options{NoIndex: true}}, {"lines-index", &Options{IndexDir: cache}}, {"symbols-only", &Options{NoDebugInfo: true}}} {
		b.Run(c.name, func(b *testing.B) {
			f, err := New(c.opts).File(libcPath)
			if err != nil {
				b.Fatal(err)
			}
			frames := make([]Frame, 0, 64)
			for _, a := range addrs { // warm: every unit read
				frames = f.Frames(frames[:0], a)
			}
			b.ReportAllocs()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			cpu0 := threadCPU()
			b.ResetTimer()
			i := 0
			for b.Loop() {
				frames = f.Frames(frames[:0], addrs[i&4095])
				i++
			}
			b.ReportMetric(float64(threadCPU()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkFileManyLines: 100,000 random libc addresses with lines and
// inline chains from the line index, one Frames call each against one
// FramesOf call for all (its lookups overlapping their cache misses); an
// op is one address.
func BenchmarkFileManyLines(b *testing.B) {
	addrs := libcTextAddrs(b, 100000, 3)
	cache := b.TempDir()
	if _, err := New(&Options{IndexDir: cache}).File(libcPath); err != nil {
		b.Fatal(err)
	}
	f, err := New(&Options{IndexDir: cache}).File(libcPath)
	if err != nil {
		b.Fatal(err)
	}
	frames := make([]Frame, 0, 4*len(addrs))
	for _, c := range []struct {
		name string
		run  func()
	}{
		{"Frames", func() {
			frames = frames[:0]
			for _, a := range addrs {
				frames = f.Frames(frames, a)
			}
		}},
		{"FramesOf", func() { frames = f.FramesOf(frames[:0], addrs) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			c.run()
			b.ResetTimer()
			for b.Loop() {
				c.run()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(addrs)), "ns/addr")
		})
	}
}

// threadCPU is the CPU time of the calling thread in nanoseconds: on a
// machine other work shares, ns/op counts the time the benchmark waited
// for a CPU, cpu-ns/op does not.
func threadCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(1, &ru); err != nil { // RUSAGE_THREAD
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// libcTextAddrs returns n random addresses in libc's .text.
func libcTextAddrs(b testing.TB, n int, seed uint64) []uint64 {
	ef, err := elf.Open(libcPath)
	if err != nil {
		b.Skip(err)
	}
	text := ef.Section(".text")
	ef.Close()
	rng := rand.New(rand.NewPCG(seed, seed))
	addrs := make([]uint64, n)
	for i := range addrs {
		addrs[i] = text.Addr + rng.Uint64N(text.Size)
	}
	return addrs
}

// BenchmarkFirstLines: the first symbolization of libc with its debug
// file by a new Symbolizer: opening libc, finding and opening libc6-dbg's
// debug file, and naming one address, then 10,000 random addresses
// (most of libc's units read), each with file:line and inline chain;
// from the DWARF, building the line index, and reading it.
func BenchmarkFirstLines(b *testing.B) {
	for _, n := range []int{1, 10000} {
		for _, mode := range []string{"dwarf", "index-build", "index-read"} {
			b.Run(strconv.Itoa(n)+"/"+mode, func(b *testing.B) {
				firstLines(b, n, mode)
			})
		}
	}
}

// firstLines is BenchmarkFirstLines with NoIndex (dwarf), with a new
// cache each time (index-build: the DWARF read and the index built and
// written), or with the index built before (index-read).
func firstLines(b *testing.B, n int, mode string) {
	addrs := libcTextAddrs(b, n, 2)
	frames := make([]Frame, 0, 64)
	cache := b.TempDir()
	if mode == "index-read" {
		if _, err := New(&Options{IndexDir: cache}).File(libcPath); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		opts := &Options{IndexDir: cache}
		switch mode {
		case "dwarf":
			opts.NoIndex = true
		case "index-build":
			b.StopTimer()
			os.RemoveAll(cache)
			b.StartTimer()
		}
		f, err := New(opts).File(libcPath)
		if err != nil {
			b.Fatal(err)
		}
		lines := 0
		for _, a := range addrs {
			frames = f.Frames(frames[:0], a)
			if frames[0].Line > 0 {
				lines++
			}
		}
		if lines == 0 {
			b.Fatal("no line")
		}
	}
}

// bigDWARF builds a C program of 50,000 functions (ten units of 5,000,
// each function with two calls of always_inline helpers, so inlined
// subroutines too) with -g -O0 in dir and returns its path. gcc takes
// about 80 s of CPU; PROBEKIT_BIG_DWARF names one built before.
func bigDWARF(b *testing.B) string {
	if p := os.Getenv("PROBEKIT_BIG_DWARF"); p != "" {
		return p
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		b.Skip(err)
	}
	dir := b.TempDir()
	var objs []string
	var errs []error
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 2)
	for u := range 10 {
		var src strings.Builder
		src.WriteString("extern volatile int g;\n")
		for k := range 50 {
			fmt.Fprintf(&src, "static inline __attribute__((always_inline)) int h%d(int x) { if (x > %d) g += x; return x * %d + g; }\n", k, k, k+3)
		}
		for n := u * 5000; n < (u+1)*5000; n++ {
			fmt.Fprintf(&src, "int f%d(int x) { return h%d(x) + h%d(x + 1) + %d; }\n", n, n%50, n*7%50, n)
		}
		c := filepath.Join(dir, fmt.Sprintf("u%d.c", u))
		if err := os.WriteFile(c, []byte(src.String()), 0o644); err != nil {
			b.Fatal(err)
		}
		objs = append(objs, c+".o")
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if out, err := exec.Command("gcc", "-c", "-g", "-O0", "-o", c+".o", c).CombinedOutput(); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("%s: %v: %s", c, err, out))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		b.Fatal(errs)
	}
	main := filepath.Join(dir, "main.c")
	if err := os.WriteFile(main, []byte("volatile int g;\nint f0(int);\nint main(void) { return f0(g); }\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	bin := filepath.Join(dir, "big")
	if out, err := exec.Command("gcc", append([]string{"-o", bin, main}, objs...)...).CombinedOutput(); err != nil {
		b.Fatalf("link: %v: %s", err, out)
	}
	return bin
}

// BenchmarkLargeDWARF: the memory of a File over a program of 50,000
// functions with DWARF, every function's entry and middle symbolized
// (every unit's tables read), against the size of its DWARF sections:
// heap-MiB is the heap in use at the end (garbage included, no GC
// forced), live-MiB after a GC, debug-MiB the sections' bytes.
func BenchmarkLargeDWARF(b *testing.B) {
	bin := bigDWARF(b)
	ef, err := elf.Open(bin)
	if err != nil {
		b.Fatal(err)
	}
	var debug uint64
	for _, s := range ef.Sections {
		if strings.HasPrefix(s.Name, ".debug_") {
			debug += s.Size
		}
	}
	syms, err := ef.Symbols()
	ef.Close()
	if err != nil {
		b.Fatal(err)
	}
	var addrs []uint64
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Size > 0 && strings.HasPrefix(s.Name, "f") {
			addrs = append(addrs, s.Value, s.Value+s.Size/2)
		}
	}
	if len(addrs) < 100000 {
		b.Fatalf("%d functions", len(addrs)/2)
	}
	var heap, live uint64
	frames := make([]Frame, 0, 16)
	for b.Loop() {
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		f, err := New(nil).File(bin)
		if err != nil {
			b.Fatal(err)
		}
		inlined := 0
		for _, a := range addrs {
			frames = f.Frames(frames[:0], a)
			if frames[0].Line == 0 {
				b.Fatalf("%#x: no line: %+v", a, frames)
			}
			if len(frames) > 1 {
				inlined++
			}
		}
		if inlined == 0 {
			b.Fatal("no inlined frame")
		}
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		heap = after.HeapInuse - before.HeapInuse
		runtime.GC()
		runtime.ReadMemStats(&after)
		live = after.HeapInuse - before.HeapInuse
		runtime.KeepAlive(f)
	}
	b.ReportMetric(float64(heap)/(1<<20), "heap-MiB")
	b.ReportMetric(float64(live)/(1<<20), "live-MiB")
	b.ReportMetric(float64(debug)/(1<<20), "debug-MiB")
	b.ReportMetric(float64(len(addrs)), "addrs")
}
