package symbolize

import (
	"bufio"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/procmaps"
)

func TestMain(m *testing.M) { os.Exit(testkit.RunWithLeakCheck(m)) }

const libjvm = "/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so"

// nmFunc is one sized code symbol as nm -S lists it.
type nmFunc struct {
	addr, size uint64
	name       string
}

// nmFuncs returns the sized text symbols (T, t, W, w) of path, by nm.
func nmFuncs(tb testing.TB, path string) []nmFunc {
	tb.Helper()
	out, err := exec.Command("nm", "-S", "--defined-only", path).Output()
	if err != nil {
		testkit.Unavailable(tb, "nm %s: %v", path, err)
	}
	var fs []nmFunc
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.SplitN(line, " ", 4)
		if len(f) != 4 || !strings.Contains("TtWw", f[2]) {
			continue
		}
		a, err1 := strconv.ParseUint(f[0], 16, 64)
		s, err2 := strconv.ParseUint(f[1], 16, 64)
		if err1 != nil || err2 != nil || s == 0 {
			continue
		}
		fs = append(fs, nmFunc{a, s, f[3]})
	}
	sort.Slice(fs, func(i, j int) bool { return fs[i].addr < fs[j].addr })
	return fs
}

// TestSymbolizeFileAgreesWithNm: on thousands of random addresses inside libjvm's
// functions, the symbolizer names the function nm lists there (the
// innermost one holding the address; any of its aliases) and the offset.
func TestSymbolizeFileAgreesWithNm(t *testing.T) {
	if _, err := os.Stat(libjvm); err != nil {
		testkit.Unavailable(t, "no libjvm: %v", err)
	}
	fs := nmFuncs(t, libjvm)
	if len(fs) < 10000 {
		t.Fatalf("nm lists only %d functions", len(fs))
	}
	f, err := New(nil).File(libjvm)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 5000
	for range n {
		fn := fs[rng.IntN(len(fs))]
		addr := fn.addr + rng.Uint64N(fn.size)
		// nm's answer: of the symbols holding addr, those with the
		// highest address.
		var want []string
		var wantAddr uint64
		for _, g := range fs {
			if g.addr > addr {
				break
			}
			if addr < g.addr+g.size {
				if g.addr > wantAddr || want == nil {
					want, wantAddr = nil, g.addr
				}
				if g.addr == wantAddr {
					want = append(want, g.name)
				}
			}
		}
		fr := f.Frame(addr)
		if !slices.Contains(want, fr.Function) || fr.Offset != addr-wantAddr || fr.Object != libjvm {
			t.Fatalf("%#x: got %s+%#x in %q, nm says %v+%#x", addr, fr.Function, fr.Offset, fr.Object, want, addr-wantAddr)
		}
	}
}

func TestSymbolizeFileDemangle(t *testing.T) {
	if _, err := os.Stat(libjvm); err != nil {
		testkit.Unavailable(t, "no libjvm: %v", err)
	}
	var fn nmFunc
	for _, g := range nmFuncs(t, libjvm) {
		if g.name == "_ZN2os5sleepEP6Threadl" || g.name == "_ZN2os11naked_yieldEv" {
			fn = g
			break
		}
	}
	if fn.name == "" {
		t.Skip("no os::naked_yield in this libjvm")
	}
	f, err := New(&Options{Demangle: true}).File(libjvm)
	if err != nil {
		t.Fatal(err)
	}
	fr := f.Frame(fn.addr + 1)
	if !strings.HasPrefix(fr.Function, "os::") || !strings.Contains(fr.Function, "(") || fr.Offset != 1 {
		t.Fatalf("%s demangled as %q+%#x", fn.name, fr.Function, fr.Offset)
	}
}

// TestSymbolizeFileGoStripped: a Go program built with -s -w has no .symtab; its
// functions and lines come from .gopclntab, as for the unstripped build.
func TestSymbolizeFileGoStripped(t *testing.T) {
	s := New(nil)
	full, err := s.File(testkit.Fixture("goprog"))
	if err != nil {
		t.Fatal(err)
	}
	stripped, err := s.File(testkit.Fixture("goprog_stripped"))
	if err != nil {
		t.Fatal(err)
	}
	vaddr, _ := testkit.SymbolOffset(t, testkit.Fixture("goprog"), "main.add")
	for _, f := range []*File{full, stripped} {
		fr := f.Frame(vaddr)
		if fr.Function != "main.add" || fr.Offset != 0 || !strings.HasSuffix(fr.File, "main.go") || fr.Line != 34 {
			t.Errorf("%s: main.add entry is %+v", f.path, fr)
		}
	}
}

// mapsOf returns the mappings of pid.
func mapsOf(t *testing.T, pid int) []procmaps.Mapping {
	t.Helper()
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/maps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ms, _, err := procmaps.ParseMaps(bufio.NewReader(f))
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// runtimeAddr returns where pid maps the code of symbol name of the file
// at host path (mapped as mapped, its path in maps), computed from
// /proc/PID/maps: the executable mapping of the file holding the symbol's
// file offset.
func runtimeAddr(t *testing.T, pid int, host, mapped, name string) uint64 {
	t.Helper()
	_, off := testkit.SymbolOffset(t, host, name)
	for _, m := range mapsOf(t, pid) {
		if m.Path == mapped && m.Perms&procmaps.Exec != 0 && m.Offset <= off && off < m.Offset+m.Size() {
			return m.Start + off - m.Offset
		}
	}
	t.Fatalf("pid %d does not map %s (%s) executable at offset %#x", pid, mapped, name, off)
	return 0
}

func abs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	a, err = filepath.EvalSymlinks(a)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// checkFrame asserts a frame's function, offset and object.
func checkFrame(t *testing.T, fr Frame, fn string, off uint64, obj string) {
	t.Helper()
	if fr.Function != fn || fr.Offset != off || fr.Object != obj {
		t.Errorf("%#x: got %s+%#x in %q, want %s+%#x in %q", fr.Address, fr.Function, fr.Offset, fr.Object, fn, off, obj)
	}
}

// TestSymbolizeProcessPIE: a live PIE and its shared library, by runtime address.
func TestSymbolizeProcessPIE(t *testing.T) {
	exe, lib := abs(t, testkit.Fixture("usdt_lib_user")), abs(t, testkit.Fixture("libusdt_lib.so"))
	fx := testkit.Start(t, exe)
	mainAddr := runtimeAddr(t, fx.PID(), exe, exe, "main")
	libAddr := runtimeAddr(t, fx.PID(), lib, lib, "usdt_lib_fire_shared")
	p, err := New(nil).Process(fx.PID())
	if err != nil {
		t.Fatal(err)
	}
	frames, err := p.Symbolize([]uint64{mainAddr + 5, libAddr, libAddr + 0x20, 0})
	if err != nil {
		t.Fatal(err)
	}
	checkFrame(t, frames[0], "main", 5, exe)
	checkFrame(t, frames[1], "usdt_lib_fire_shared", 0, lib)
	checkFrame(t, frames[2], "usdt_lib_fire_shared", 0x20, lib)
	checkFrame(t, frames[3], "", 0, "")
	// A heap or stack address is named by its pseudo mapping.
	for _, m := range mapsOf(t, fx.PID()) {
		if m.Path == "[stack]" {
			fr, err := p.Symbolize([]uint64{m.Start})
			if err != nil {
				t.Fatal(err)
			}
			checkFrame(t, fr[0], "", 0, "[stack]")
		}
	}
}

// TestSymbolizeProcessGoStripped: a stripped Go program, by runtime address, with
// its source lines.
func TestSymbolizeProcessGoStripped(t *testing.T) {
	exe := abs(t, testkit.Fixture("goprog_stripped"))
	fx := testkit.Start(t, exe)
	vaddr, _ := testkit.SymbolOffset(t, testkit.Fixture("goprog"), "main.add")
	p, err := New(nil).Process(fx.PID())
	if err != nil {
		t.Fatal(err)
	}
	// Not PIE: the runtime address is the link-time one.
	frames, err := p.Symbolize([]uint64{vaddr})
	if err != nil {
		t.Fatal(err)
	}
	checkFrame(t, frames[0], "main.add", 0, exe)
	if !strings.HasSuffix(frames[0].File, "main.go") || frames[0].Line != 34 {
		t.Errorf("main.add at %s:%d", frames[0].File, frames[0].Line)
	}
}

// TestSymbolizeProcessReplacedFile: the program file is replaced (renamed over)
// after it was mapped. The process's code is named from the file it maps
// (reached through map_files), never from the new file at that path.
func TestSymbolizeProcessReplacedFile(t *testing.T) {
	testkit.RequireKernel(t) // root: map_files needs CAP_SYS_ADMIN
	dir := t.TempDir()
	exe := filepath.Join(abs(t, dir), "prog")
	testkit.CopyFile(t, testkit.Fixture("usdt_sample"), exe)
	fx := testkit.Start(t, exe)
	addr := runtimeAddr(t, fx.PID(), testkit.Fixture("usdt_sample"), exe, "fire_consts")
	other := filepath.Join(dir, "other")
	testkit.CopyFile(t, testkit.Fixture("usdt_lib_user"), other)
	if err := os.Rename(other, exe); err != nil {
		t.Fatal(err)
	}
	p, err := New(nil).Process(fx.PID())
	if err != nil {
		t.Fatal(err)
	}
	frames, err := p.Symbolize([]uint64{addr + 3})
	if err != nil {
		t.Fatal(err)
	}
	checkFrame(t, frames[0], "fire_consts", 3, exe)

	// The same after removal.
	if err := os.Remove(exe); err != nil {
		t.Fatal(err)
	}
	p2, err := New(nil).Process(fx.PID())
	if err != nil {
		t.Fatal(err)
	}
	if frames, err = p2.Symbolize([]uint64{addr + 3}); err != nil {
		t.Fatal(err)
	}
	checkFrame(t, frames[0], "fire_consts", 3, exe)
}

// TestSymbolizeProcessContainer: a process in its own mount namespace and root;
// its files are read inside that root and named as it names them.
func TestSymbolizeProcessContainer(t *testing.T) {
	fx, _ := testkit.StartContainer(t)
	addr := runtimeAddr(t, fx.PID(), testkit.Fixture("libusdt_lib.so"), "/app/libusdt_lib.so", "usdt_lib_fire_libonly")
	mainAddr := runtimeAddr(t, fx.PID(), testkit.Fixture("usdt_lib_user"), "/app/usdt_lib_user", "fire")
	p, err := New(nil).Process(fx.PID())
	if err != nil {
		t.Fatal(err)
	}
	frames, err := p.Symbolize([]uint64{addr + 1, mainAddr + 2})
	if err != nil {
		t.Fatal(err)
	}
	checkFrame(t, frames[0], "usdt_lib_fire_libonly", 1, "/app/libusdt_lib.so")
	checkFrame(t, frames[1], "fire", 2, "/app/usdt_lib_user")
}

// TestSymbolizeProcessGone: a process that exited gives ErrProcessGone, not names.
func TestSymbolizeProcessGone(t *testing.T) {
	exe := abs(t, testkit.Fixture("usdt_sample"))
	fx := testkit.Start(t, exe)
	addr := runtimeAddr(t, fx.PID(), exe, exe, "main")
	p, err := New(nil).Process(fx.PID())
	if err != nil {
		t.Fatal(err)
	}
	fx.Kill()
	frames, err := p.Symbolize([]uint64{addr})
	if !errors.Is(err, procmaps.ErrProcessGone) || frames != nil {
		t.Fatalf("after exit: %v, %v", frames, err)
	}
	if _, err := New(nil).Process(fx.PID()); !errors.Is(err, procmaps.ErrProcessGone) {
		t.Fatalf("opening an exited process: %v", err)
	}
}

// TestSymbolizeSharedTables: two processes mapping one library share its table
// (one read); the path a process names it by does not matter.
func TestSymbolizeSharedTables(t *testing.T) {
	exe := abs(t, testkit.Fixture("usdt_lib_user"))
	a, b := testkit.Start(t, exe), testkit.Start(t, exe)
	s := New(nil)
	var tabs []*table
	for _, fx := range []*testkit.Process{a, b} {
		p, err := s.Process(fx.PID())
		if err != nil {
			t.Fatal(err)
		}
		addr := runtimeAddr(t, fx.PID(), exe, exe, "main")
		if _, err := p.Symbolize([]uint64{addr}); err != nil {
			t.Fatal(err)
		}
		m := p.snap.Load().find(addr)
		tabs = append(tabs, m.obj.tab.Load())
	}
	if tabs[0] == nil || tabs[0] != tabs[1] {
		t.Fatalf("tables not shared: %p %p", tabs[0], tabs[1])
	}
}

// TestSymbolizeCacheCeiling: with a ceiling below two tables, reading a second
// file evicts the first; a File holding an evicted table still answers
// and puts it back.
func TestSymbolizeCacheCeiling(t *testing.T) {
	s := New(&Options{MaxTableBytes: 1})
	a, err := s.File(testkit.Fixture("usdt_sample"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.File(testkit.Fixture("goprog")); err != nil {
		t.Fatal(err)
	}
	at := a.t.Load()
	if !at.evicted.Load() {
		t.Fatal("first table not evicted")
	}
	n := 0
	s.cache.tables.Range(func(any, any) bool { n++; return true })
	if n != 1 || len(s.cache.ring) != 1 {
		t.Fatalf("%d tables cached, ring %d", n, len(s.cache.ring))
	}
	vaddr, _ := testkit.SymbolOffset(t, testkit.Fixture("usdt_sample"), "main")
	if fr := a.Frame(vaddr); fr.Function != "main" {
		t.Fatalf("evicted table: %+v", fr)
	}
	// Used again, the table is back in the cache (not read again), and
	// the other one is out.
	if a.t.Load() != at || at.evicted.Load() || len(s.cache.ring) != 1 || s.cache.ring[0] != at {
		t.Fatalf("evicted table not put back: ring %d", len(s.cache.ring))
	}
}

// TestSymbolizeIndexAgreesWithAt: the address index gives (*Funcs).At's answer
// everywhere: at every function start and end, one byte before each, and
// at random addresses over the whole range, for C++, C and Go files.
func TestSymbolizeIndexAgreesWithAt(t *testing.T) {
	for _, path := range []string{libjvm, testkit.Fixture("usdt_sample"), testkit.Fixture("goprog"), testkit.Fixture("goprog_stripped"), testkit.Fixture("libusdt_lib.so")} {
		if _, err := os.Stat(path); err != nil {
			continue
		}
		f, err := New(nil).File(path)
		if err != nil {
			t.Fatal(err)
		}
		funcs := f.t.Load().funcs
		x := buildIndex(funcs)
		if x == nil {
			t.Fatalf("%s: no index", path)
		}
		check := func(a uint64) {
			i, ok := funcs.At(a)
			j, ok2 := x.at(a)
			if ok != ok2 || ok && i != j {
				t.Fatalf("%s: %#x: At %d %v, index %d %v", path, a, i, ok, j, ok2)
			}
		}
		var hi uint64
		for i := range funcs.Len() {
			fn := funcs.Func(i)
			end := fn.Address + max(fn.Size, 1)
			hi = max(hi, end)
			for _, a := range []uint64{fn.Address - 1, fn.Address, fn.Address + 1, end - 1, end, end + 1} {
				check(a)
			}
		}
		rng := rand.New(rand.NewPCG(5, 6))
		lo := funcs.Address(0)
		for range 100000 {
			check(lo - 100 + rng.Uint64N(hi-lo+200))
		}
		check(0)
		check(^uint64(0))
	}
}

// TestSymbolizeConcurrent: goroutines symbolizing several files and a
// process at once, under a ceiling that keeps evicting, get the right
// names (run with -race).
func TestSymbolizeConcurrent(t *testing.T) {
	exe := abs(t, testkit.Fixture("usdt_lib_user"))
	fx := testkit.Start(t, exe)
	addr := runtimeAddr(t, fx.PID(), exe, exe, "main")
	s := New(&Options{MaxTableBytes: 1})
	p, err := s.Process(fx.PID())
	if err != nil {
		t.Fatal(err)
	}
	files := []string{testkit.Fixture("usdt_sample"), testkit.Fixture("goprog"), testkit.Fixture("libusdt_lib.so")}
	names := []string{"main", "main.add", "usdt_lib_fire_shared"}
	var vaddrs []uint64
	for k := range files {
		v, _ := testkit.SymbolOffset(t, files[k], names[k])
		vaddrs = append(vaddrs, v)
	}
	errs := make(chan error, 8)
	for g := range 8 {
		go func() {
			for i := range 200 {
				k := (g + i) % len(files)
				f, err := s.File(files[k])
				if err != nil {
					errs <- err
					return
				}
				if fr := f.Frame(vaddrs[k]); fr.Function != names[k] {
					errs <- fmt.Errorf("%s: %+v", files[k], fr)
					return
				}
				frames, err := p.Symbolize([]uint64{addr})
				if err != nil || frames[0].Function != "main" {
					errs <- fmt.Errorf("process: %v %v", frames, err)
					return
				}
			}
			errs <- nil
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// TestSymbolizeVDSO: an address in the [vdso] mapping is named from the
// vDSO image in the process's memory.
func TestSymbolizeVDSO(t *testing.T) {
	var vdso procmaps.Mapping
	for _, m := range mapsOf(t, os.Getpid()) {
		if m.Path == "[vdso]" {
			vdso = m
		}
	}
	if vdso.Start == 0 {
		t.Skip("no vDSO mapped")
	}
	mem, err := os.Open("/proc/self/mem")
	if err != nil {
		t.Fatal(err)
	}
	img := make([]byte, vdso.Size())
	_, err = mem.ReadAt(img, int64(vdso.Start))
	mem.Close()
	if err != nil {
		t.Fatal(err)
	}
	ef, err := elf.NewFile(bytes.NewReader(img))
	if err != nil {
		t.Fatal(err)
	}
	syms, err := ef.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	var addr uint64
	for _, s := range syms {
		if s.Name == "__vdso_clock_gettime" {
			for _, p := range ef.Progs {
				if p.Type == elf.PT_LOAD && p.Vaddr <= s.Value && s.Value < p.Vaddr+p.Filesz {
					addr = vdso.Start + s.Value - p.Vaddr + p.Off
				}
			}
		}
	}
	if addr == 0 {
		t.Skip("no __vdso_clock_gettime")
	}
	p, err := New(nil).Process(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	frames, err := p.Symbolize([]uint64{addr + 2})
	if err != nil {
		t.Fatal(err)
	}
	fr := frames[0]
	if (fr.Function != "__vdso_clock_gettime" && fr.Function != "clock_gettime") || fr.Offset != 2 || fr.Object != "[vdso]" {
		t.Fatalf("%+v", fr)
	}
}

// TestSymbolizeRecorded: addresses recorded while a process ran are named
// after it exited from what was read before (Preload), while Symbolize
// says the process is gone; without Preload the object is still named.
func TestSymbolizeRecorded(t *testing.T) {
	exe, lib := abs(t, testkit.Fixture("usdt_lib_user")), abs(t, testkit.Fixture("libusdt_lib.so"))
	fx := testkit.Start(t, exe)
	mainAddr := runtimeAddr(t, fx.PID(), exe, exe, "main")
	libAddr := runtimeAddr(t, fx.PID(), lib, lib, "usdt_lib_fire_shared")
	s := New(&Options{MaxTableBytes: 1}) // nothing kept but what a Process holds
	preloaded, err := s.Process(fx.PID())
	if err != nil {
		t.Fatal(err)
	}
	if err := preloaded.Preload(); err != nil {
		t.Fatal(err)
	}
	cold, err := New(nil).Process(fx.PID())
	if err != nil {
		t.Fatal(err)
	}
	fx.Kill()
	addrs := []uint64{mainAddr + 1, libAddr + 2}
	if _, err := preloaded.SymbolizeInto(nil, addrs); !errors.Is(err, procmaps.ErrProcessGone) {
		t.Fatalf("SymbolizeInto after exit: %v", err)
	}
	frames, err := preloaded.SymbolizeRecorded(nil, addrs)
	if err != nil {
		t.Fatal(err)
	}
	checkFrame(t, frames[0], "main", 1, exe)
	checkFrame(t, frames[1], "usdt_lib_fire_shared", 2, lib)
	if frames, err = cold.SymbolizeRecorded(frames[:0], addrs); err != nil {
		t.Fatal(err)
	}
	checkFrame(t, frames[0], "", 0, exe)
	checkFrame(t, frames[1], "", 0, lib)
}

// TestGoInlinedFrames: a stripped Go program (functions only in
// .gopclntab, moduledata found without symbols) gives the same frames as
// the program with its symbol table, inlined calls included, for every
// 3rd byte of its code.
func TestGoInlinedFrames(t *testing.T) {
	s := New(nil)
	full, err := s.File(testkit.Fixture("goprog"))
	if err != nil {
		t.Fatal(err)
	}
	stripped, err := s.File(testkit.Fixture("goprog_stripped"))
	if err != nil {
		t.Fatal(err)
	}
	lo, hi := textOf(t, testkit.Fixture("goprog"))
	inlined := 0
	var a, b []Frame
	for pc := lo; pc < hi; pc += 3 {
		a, b = full.Frames(a[:0], pc), stripped.Frames(b[:0], pc)
		if len(a) != len(b) {
			t.Fatalf("%#x: %v, stripped %v", pc, a, b)
		}
		for i := range a {
			// The physical function's name comes from .symtab in one,
			// pclntab in the other, which spell some names apart
			// (internal/cpu.cpuid.abi0, untracedG.7 for untracedG·7).
			if a[i].Inlined && a[i].Function != b[i].Function || a[i].File != b[i].File || a[i].Line != b[i].Line || a[i].Inlined != b[i].Inlined {
				t.Fatalf("%#x frame %d: %v, stripped %v", pc, i, a[i], b[i])
			}
		}
		inlined += len(a) - 1
	}
	if inlined == 0 {
		t.Fatal("no inlined frames in goprog")
	}
	t.Logf("%d inlined frames", inlined)
}

// textOf is the address range of file's .text.
func textOf(t *testing.T, file string) (lo, hi uint64) {
	t.Helper()
	f, err := elf.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sec := f.Section(".text")
	if sec == nil {
		t.Fatalf("%s: no .text", file)
	}
	return sec.Addr, sec.Addr + sec.Size
}
