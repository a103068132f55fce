package symbolize

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/probekit/probekit/debuginfo"
)

// textAddrs returns every address of path's .text, or n random ones of
// it when n > 0.
func textAddrs(t *testing.T, path string) []uint64 {
	ef, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	text := ef.Section(".text")
	addrs := make([]uint64, 0, text.Size)
	for a := text.Addr; a < text.Addr+text.Size; a++ {
		addrs = append(addrs, a)
	}
	return addrs
}

// symbolizeAll returns the frames of every address, through a new
// Symbolizer with opts, and the File's table.
func symbolizeAll(t *testing.T, path string, opts *Options, addrs []uint64) ([]Frame, *table) {
	var warns []error
	o := *opts
	o.DebugInfo.Warn = func(err error) { warns = append(warns, err) }
	f, err := New(&o).File(path)
	if err != nil {
		t.Fatal(err)
	}
	var frames []Frame
	for _, a := range addrs {
		frames = f.Frames(frames, a)
	}
	if len(warns) > 0 {
		t.Errorf("%s: warnings %v", path, warns)
	}
	return frames, f.t.Load()
}

// TestLineIndexFrames: a Symbolizer that builds the line index (the
// first), and one that reads it (the second, which opens no DWARF), give
// the frames of a Symbolizer without it at every address of each
// fixture's .text (C with inlining, C++ demangled, DWARF 4 and 5, dwz
// with its common file, Rust) and at 5,000 random libc addresses with
// libc6-dbg's DWARF.
func TestLineIndexFrames(t *testing.T) {
	dir := filepath.Join("..", "testdata", "lines", "bin")
	cases := []struct {
		path  string
		addrs func(*testing.T, string) []uint64
	}{
		{filepath.Join(dir, "lines_c_v4"), textAddrs},
		{filepath.Join(dir, "lines_c_v5"), textAddrs},
		{filepath.Join(dir, "lines_cc_v5"), textAddrs},
		{filepath.Join(dir, "lines_dwz"), textAddrs},
		{filepath.Join(dir, "lines_dwz5"), textAddrs},
		{filepath.Join(dir, "lines_rs"), func(t *testing.T, p string) []uint64 { return randomAddrs(t, p, 20000) }},
		{libcPath, func(t *testing.T, p string) []uint64 {
			if testing.Short() {
				t.Skip("reads libc6-dbg's DWARF (-short)")
			}
			libcDebug(t)
			return libcTextAddrs(t, 5000, 7)
		}},
	}
	for _, c := range cases {
		t.Run(filepath.Base(c.path), func(t *testing.T) {
			addrs := c.addrs(t, c.path)
			cache := t.TempDir()
			for _, dem := range []bool{false, true} {
				want, wt := symbolizeAll(t, c.path, &Options{NoIndex: true, Demangle: dem}, addrs)
				built, bt := symbolizeAll(t, c.path, &Options{IndexDir: cache, Demangle: dem}, addrs)
				read, rt := symbolizeAll(t, c.path, &Options{IndexDir: cache, Demangle: dem}, addrs)
				if wt.lines == nil || wt.index != nil || bt.index == nil || rt.index == nil || rt.lines != nil {
					t.Fatalf("tables: without the index lines %v index %v; building index %v; reading lines %v index %v",
						wt.lines != nil, wt.index != nil, bt.index != nil, rt.lines != nil, rt.index != nil)
				}
				if !slices.Equal(want, built) || !slices.Equal(want, read) {
					for i := range min(len(want), len(built), len(read)) {
						if want[i] != built[i] || want[i] != read[i] {
							t.Fatalf("frame %d: DWARF %v, index built %v, index read %v", i, want[i], built[i], read[i])
						}
					}
					t.Fatalf("%d frames from DWARF, %d from the index built, %d read", len(want), len(built), len(read))
				}
				inlined := 0
				for _, f := range want {
					if f.Inlined {
						inlined++
					}
				}
				if inlined == 0 || want[0].Line == 0 && len(want) < 100 {
					t.Errorf("%d frames, %d inlined", len(want), inlined)
				}
				t.Logf("%d addresses, %d frames, %d inlined, index of %d bytes", len(addrs), len(want), inlined, rt.index.Size())
			}
		})
	}
}

// libcDebug skips without libc6-dbg (fails under PROBEKIT_REQUIRE_KERNEL,
// as make deps installs it).
func libcDebug(t *testing.T) {
	if _, err := os.Stat("/usr/lib/debug/.build-id"); err != nil {
		if os.Getenv("PROBEKIT_REQUIRE_KERNEL") != "" {
			t.Fatalf("libc6-dbg missing (make deps installs it): %v", err)
		}
		t.Skipf("libc6-dbg not installed: %v", err)
	}
}

// TestLineIndexRebuilt: a corrupt index in the cache is said in a
// warning, not used, and replaced by a good one; a cache directory
// writable by others is refused with a warning and the DWARF serves.
func TestLineIndexRebuilt(t *testing.T) {
	path := filepath.Join("..", "testdata", "lines", "bin", "lines_c_v5")
	addrs := textAddrs(t, path)
	want, _ := symbolizeAll(t, path, &Options{NoIndex: true}, addrs)
	cache := t.TempDir()
	symbolizeAll(t, path, &Options{IndexDir: cache}, addrs)
	ents, err := os.ReadDir(filepath.Join(cache, "lines"))
	if err != nil || len(ents) != 1 {
		t.Fatalf("cache: %v %v", ents, err)
	}
	file := filepath.Join(cache, "lines", ents[0].Name())
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-10] ^= 0xff
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	run := func() ([]Frame, []error, *table) {
		var warns []error
		f, err := New(&Options{IndexDir: cache, DebugInfo: debuginfo.Options{Warn: func(e error) { warns = append(warns, e) }}}).File(path)
		if err != nil {
			t.Fatal(err)
		}
		var frames []Frame
		for _, a := range addrs {
			frames = f.Frames(frames, a)
		}
		return frames, warns, f.t.Load()
	}
	got, warns, _ := run()
	var ie *debuginfo.IndexError
	if len(warns) != 1 || !errors.As(warns[0], &ie) || !slices.Equal(got, want) {
		t.Fatalf("corrupt index: warnings %v, frames equal %v", warns, slices.Equal(got, want))
	}
	if got, warns, tab := run(); len(warns) != 0 || tab.index == nil || tab.lines != nil || !slices.Equal(got, want) {
		t.Fatalf("rebuilt index: warnings %v, index %v, frames equal %v", warns, tab.index != nil, slices.Equal(got, want))
	}
	if err := os.Chmod(filepath.Join(cache, "lines"), 0o777); err != nil {
		t.Fatal(err)
	}
	var ce *debuginfo.IndexCacheError
	got, warns, tab := run()
	if len(warns) == 0 || !errors.As(warns[0], &ce) || tab.index != nil || tab.lines == nil || !slices.Equal(got, want) {
		t.Fatalf("cache writable by others: warnings %v, index %v, frames equal %v", warns, tab.index != nil, slices.Equal(got, want))
	}
}

// TestLineIndexNoAlloc: warm lookups from a line index that holds the
// symbols allocate nothing: File.Frames into a slice with room, and
// Process.SymbolizeInto over this process's libc code (when the test
// binary maps libc).
func TestLineIndexNoAlloc(t *testing.T) {
	libcDebug(t)
	cache := t.TempDir()
	if _, err := New(&Options{IndexDir: cache}).File(libcPath); err != nil {
		t.Fatal(err)
	}
	s := New(&Options{IndexDir: cache})
	f, err := s.File(libcPath)
	if err != nil {
		t.Fatal(err)
	}
	if tab := f.t.Load(); !tab.symIndex {
		t.Fatal("the second File does not read the index with its symbols")
	}
	addrs := libcTextAddrs(t, 1024, 11)
	frames := make([]Frame, 0, 64)
	for _, a := range addrs {
		frames = f.Frames(frames[:0], a)
	}
	if n := testing.AllocsPerRun(20, func() {
		for _, a := range addrs {
			frames = f.Frames(frames[:0], a)
		}
	}); n != 0 {
		t.Errorf("File.Frames: %v allocations per 1024 lookups", n)
	}
	// FramesOf gives what Frames gives for each address, in order,
	// and allocates nothing either.
	var want []Frame
	for _, a := range addrs {
		want = f.Frames(want, a)
	}
	many := make([]Frame, 0, 2*len(want))
	if many = f.FramesOf(many, addrs); !slices.Equal(many, want) {
		t.Fatalf("FramesOf: %d frames differ from Frames' %d", len(many), len(want))
	}
	if n := testing.AllocsPerRun(20, func() { many = f.FramesOf(many[:0], addrs) }); n != 0 {
		t.Errorf("File.FramesOf: %v allocations per 1024 addresses", n)
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	var lo, hi uint64
	for _, line := range strings.Split(string(maps), "\n") {
		if f := strings.Fields(line); len(f) >= 6 && f[1] == "r-xp" && filepath.Base(f[5]) == "libc.so.6" {
			fmt.Sscanf(f[0], "%x-%x", &lo, &hi)
		}
	}
	if hi == 0 {
		t.Log("this test binary does not map libc: SymbolizeInto not measured")
		return
	}
	p, err := s.Process(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	run := make([]uint64, 1024)
	for i := range run {
		run[i] = lo + (hi-lo)*uint64(i)/uint64(len(run))
	}
	pf := make([]Frame, 0, 8*len(run))
	if pf, err = p.SymbolizeInto(pf[:0], run); err != nil {
		t.Fatal(err)
	}
	lined := 0
	for _, fr := range pf {
		if fr.Line > 0 {
			lined++
		}
	}
	if lined == 0 {
		t.Fatalf("no libc address of this process has a line: %v", pf[:4])
	}
	// A call also checks that the process is still the one it was (its
	// /proc stat read, procmaps.Process.Check): without allocating.
	if n := testing.AllocsPerRun(20, func() { pf, _ = p.SymbolizeInto(pf[:0], run) }); n != 0 {
		t.Errorf("Process.SymbolizeInto: %v allocations per call of 1024 addresses", n)
	}
}

// TestLineIndexSameBuildID: two files with one build ID and one size
// but other DWARF (a file name in .debug_line_str changed in place) each
// get their own frames through one cache, in either order, warm or cold:
// the index of one is never used for the other.
func TestLineIndexSameBuildID(t *testing.T) {
	orig := filepath.Join("..", "testdata", "lines", "bin", "lines_c_v5")
	b, err := os.ReadFile(orig)
	if err != nil {
		t.Fatal(err)
	}
	ef, err := elf.Open(orig)
	if err != nil {
		t.Fatal(err)
	}
	s := ef.Section(".debug_line_str")
	ef.Close()
	if s == nil {
		t.Fatal("no .debug_line_str")
	}
	sec := b[s.Offset : s.Offset+s.Size]
	i := strings.Index(string(sec), "lines_inline.h")
	if i < 0 {
		t.Fatal("lines_inline.h not in .debug_line_str")
	}
	hacked := slices.Clone(b)
	copy(hacked[int(s.Offset)+i:], "lines_hacked.h")
	dir := t.TempDir()
	a, h := filepath.Join(dir, "a"), filepath.Join(dir, "h")
	if err := os.WriteFile(a, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(h, hacked, 0o755); err != nil {
		t.Fatal(err)
	}
	addrs := textAddrs(t, orig)
	wantA, _ := symbolizeAll(t, a, &Options{NoIndex: true}, addrs)
	wantH, _ := symbolizeAll(t, h, &Options{NoIndex: true}, addrs)
	hackedFrames := 0
	for _, f := range wantH {
		if f.File != "" && strings.HasSuffix(f.File, "lines_hacked.h") {
			hackedFrames++
		}
	}
	if hackedFrames == 0 || slices.Equal(wantA, wantH) {
		t.Fatalf("the changed file gives %d frames in lines_hacked.h", hackedFrames)
	}
	for _, order := range [][]string{{a, h, a, h}, {h, a, h, a}, {a, a, h, h}} {
		cache := t.TempDir()
		for _, p := range order {
			want := wantA
			if p == h {
				want = wantH
			}
			got, _ := symbolizeAll(t, p, &Options{IndexDir: cache}, addrs)
			if !slices.Equal(got, want) {
				t.Fatalf("order %v: %s is named from another file's index", order, filepath.Base(p))
			}
		}
	}
}
