package debuginfo

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// elfSections returns OpenLines's section reader over an ELF file read
// with debug/elf (which decompresses SHF_COMPRESSED sections): test
// fixtures only, which are trusted.
func elfSections(t testing.TB, file string) func(string) ([]byte, error) {
	t.Helper()
	f, err := elf.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return func(name string) ([]byte, error) {
		s := f.Section(".debug_" + name)
		if s == nil || s.Type == elf.SHT_NOBITS {
			return nil, nil
		}
		return s.Data()
	}
}

// a2lFrame is one frame addr2line -f -i printed.
type a2lFrame struct {
	fn, file string
	line     int
}

// addr2line runs binutils' addr2line -a -f -i on addrs and returns each
// address's frames. Its file names are cleaned (see
// TestLinesAgreeWithAddr2line).
func addr2line(t testing.TB, file string, addrs []uint64, extra ...string) [][]a2lFrame {
	t.Helper()
	var in bytes.Buffer
	for _, a := range addrs {
		fmt.Fprintf(&in, "%#x\n", a)
	}
	args := append([]string{"-a", "-f", "-i", "-e", file}, extra...)
	cmd := exec.Command("addr2line", args...)
	cmd.Stdin = &in
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("addr2line: %v", err)
	}
	return parseAddr2line(t, out, len(addrs), false)
}

func parseAddr2line(t testing.TB, out []byte, n int, column bool) [][]a2lFrame {
	var res [][]a2lFrame
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	for i := 0; i < len(lines); {
		if !strings.HasPrefix(lines[i], "0x") {
			t.Fatalf("addr2line line %d: %q, want an address", i, lines[i])
		}
		i++
		var fs []a2lFrame
		for i+1 < len(lines) && !strings.HasPrefix(lines[i], "0x") {
			fr := a2lFrame{fn: lines[i]}
			// eu-addr2line: "inner inlined at FILE:LINE:COL in outer".
			fr.fn, _, _ = strings.Cut(fr.fn, " inlined at ")
			loc := lines[i+1]
			// "file:line" or "file:line (discriminator N)".
			loc, _, _ = strings.Cut(loc, " (discriminator")
			if k := strings.LastIndexByte(loc, ':'); column && k >= 0 {
				loc = loc[:k]
			}
			if k := strings.LastIndexByte(loc, ':'); k >= 0 {
				fr.file = loc[:k]
				fr.line, _ = strconv.Atoi(loc[k+1:])
			}
			if fr.file == "??" || fr.file == "" {
				fr.file = ""
			} else {
				fr.file = path.Clean(fr.file)
			}
			if fr.fn == "??" {
				fr.fn = ""
			}
			fs = append(fs, fr)
			i += 2
		}
		res = append(res, fs)
	}
	if len(res) != n {
		t.Fatalf("addr2line gave %d answers for %d addresses", len(res), n)
	}
	return res
}

func libcPaths(t testing.TB) (lib, debug string) {
	lib = "/lib/x86_64-linux-gnu/libc.so.6"
	f, err := elf.Open(lib)
	if err != nil {
		t.Skipf("no libc: %v", err)
	}
	defer f.Close()
	s := f.Section(".note.gnu.build-id")
	if s == nil {
		t.Skip("libc has no build-id")
	}
	b, err := s.Data()
	if err != nil || len(b) < 16+20 {
		t.Fatalf("libc build-id note: %v", err)
	}
	id := fmt.Sprintf("%x", b[16:])
	debug = "/usr/lib/debug/.build-id/" + id[:2] + "/" + id[2:] + ".debug"
	if _, err := os.Stat(debug); err != nil {
		if os.Getenv("PROBEKIT_REQUIRE_KERNEL") != "" {
			t.Fatalf("libc6-dbg missing (make deps installs it): %v", err)
		}
		t.Skipf("libc6-dbg not installed: %v", err)
	}
	return lib, debug
}

func textRange(t testing.TB, file string) (lo, hi uint64) {
	f, err := elf.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := f.Section(".text")
	if s == nil {
		t.Fatalf("%s: no .text", file)
	}
	return s.Addr, s.Addr + s.Size
}

// compareFrames reports how got differs from want, "" when it does not.
func compareFrames(got []SourceFrame, want []a2lFrame) string {
	if len(got) == 0 && len(want) == 1 && want[0].fn == "" && want[0].file == "" {
		return ""
	}
	if len(got) != len(want) {
		return fmt.Sprintf("%d frames %v, addr2line %d %v", len(got), got, len(want), want)
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.Function != w.fn || g.File != w.file || g.Line != w.line {
			return fmt.Sprintf("frame %d: %s %s:%d, addr2line %s %s:%d (all: %v vs %v)", i, g.Function, g.File, g.Line, w.fn, w.file, w.line, got, want)
		}
		if g.Inlined != (i < len(got)-1) {
			return fmt.Sprintf("frame %d: Inlined %v", i, g.Inlined)
		}
	}
	return ""
}

// TestLinesAgreeWithAddr2line: on random addresses of libc's .text, Lines
// over libc6-dbg's debug file gives what addr2line -f -i prints: function,
// file, line and the inline chain. addr2line joins a relative file name
// to the compilation directory without cleaning it
// ("./malloc/./malloc/malloc.c"); both are compared cleaned.
func TestLinesAgreeWithAddr2line(t *testing.T) {
	lib, debug := libcPaths(t)
	l, err := OpenLines(elfSections(t, debug), nil)
	if err != nil {
		t.Fatal(err)
	}
	lo, hi := textRange(t, lib)
	rng := rand.New(rand.NewPCG(1, 2))
	addrs := make([]uint64, 10000)
	for i := range addrs {
		addrs[i] = lo + rng.Uint64N(hi-lo)
	}
	want := addr2line(t, lib, addrs)
	bad, inlined, symtab := 0, 0, 0
	var files []uint64
	var got []SourceFrame
	for i, a := range addrs {
		got, err = l.Frames(got[:0], a)
		if err != nil {
			t.Fatalf("%#x: %v", a, err)
		}
		inlined += max(len(got)-1, 0)
		if d := compareFrames(got, want[i]); d != "" {
			// No DWARF function holds the address (assembly, libgcc's
			// soft-fp, the padding after a function): addr2line names it
			// from the symbol table, as symbolize does from its table
			// (TestSymbolizeAgreesWithAddr2line in symbolize); with no
			// line row either it prints the unit's name as the file
			// ("wcsncmp.c:?") or none (":?").
			if len(want[i]) == 1 && (len(got) == 0 && want[i][0].line == 0 ||
				len(got) == 1 && got[0].Function == "" && got[0].Line == want[i][0].line) {
				if len(got) == 1 && got[0].File != want[i][0].file {
					files = append(files, a)
				}
				symtab++
				continue
			}
			if sameButFiles(got, want[i]) {
				files = append(files, a)
				continue
			}
			bad++
			if bad <= 40 {
				t.Errorf("%#x: %s", a, d)
			}
		}
	}
	// addr2line 2.40 names, for some DWARF 5 rows, the unit's primary
	// file instead of the row's (strtof_nan.c for a row whose file
	// register is 1, strtod_nan_main.c, as readelf --debug-dump=
	// decodedline shows): eu-addr2line (elfutils) is asked about those.
	if len(files) > 0 {
		eu := euAddr2line(t, lib, files)
		for i, a := range files {
			got, _ = l.Frames(got[:0], a)
			w := eu[i]
			if len(got) == 1 && got[0].Function == "" && len(w) > 1 {
				// Padding after a function, which no subprogram covers:
				// eu-addr2line adds the frames of the last scope before
				// it (an unnamed inlined frame in fts_open at 0xfbaae).
				w = w[:1]
			}
			if d := comparePositions(got, w); d != "" {
				bad++
				t.Errorf("%#x: addr2line and eu-addr2line differ from Lines: %s", a, d)
			}
		}
	}
	t.Logf("%d addresses, %d inlined frames, %d differ; %d named by the symbol table only; %d with other files; %d KiB of tables", len(addrs), inlined, bad, symtab, len(files), l.MemoryBytes()>>10)
	if inlined < len(addrs)/10 {
		t.Errorf("only %d inlined frames in %d addresses", inlined, len(addrs))
	}
}

// euAddr2line is addr2line for elfutils' eu-addr2line, which prints
// file:line:column.
func euAddr2line(t testing.TB, file string, addrs []uint64) [][]a2lFrame {
	t.Helper()
	if _, err := exec.LookPath("eu-addr2line"); err != nil {
		t.Fatalf("eu-addr2line (elfutils, make deps installs it): %v", err)
	}
	args := []string{"-a", "-f", "-i", "-e", file}
	for _, a := range addrs {
		args = append(args, fmt.Sprintf("%#x", a))
	}
	out, err := exec.Command("eu-addr2line", args...).Output()
	if err != nil {
		t.Fatalf("eu-addr2line: %v", err)
	}
	return parseAddr2line(t, out, len(addrs), true)
}

func sameButFiles(got []SourceFrame, want []a2lFrame) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i].Function != want[i].fn || got[i].Line != want[i].line {
			return false
		}
	}
	return true
}

// comparePositions is compareFrames for files and lines only:
// eu-addr2line names the outermost function by its symbol
// ("process_entry.constprop.0").
func comparePositions(got []SourceFrame, want []a2lFrame) string {
	if len(got) != len(want) {
		return fmt.Sprintf("%d frames %v, eu-addr2line %d %v", len(got), got, len(want), want)
	}
	for i := range got {
		if got[i].File != want[i].file || got[i].Line != want[i].line {
			return fmt.Sprintf("frame %d: %s:%d, eu-addr2line %s:%d", i, got[i].File, got[i].Line, want[i].file, want[i].line)
		}
	}
	return ""
}

// TestLineRowsInOrder: the rows of libc6-dbg's line programs taken as
// they come, repeats dropped as they come (the path of the units whose
// rows come in address order), give every unit the same line table as
// all the rows sorted and then cut of their repeats (the path of the
// others).
func TestLineRowsInOrder(t *testing.T) {
	_, debug := libcPaths(t)
	secs := elfSections(t, debug)
	asIs, err := OpenLines(secs, nil)
	if err != nil {
		t.Fatal(err)
	}
	sorted, err := OpenLines(secs, nil)
	if err != nil {
		t.Fatal(err)
	}
	sorted.alwaysSort = true
	rows := 0
	for u := range asIs.units {
		a, aerr := asIs.table(u)
		s, serr := sorted.table(u)
		if (aerr == nil) != (serr == nil) {
			t.Fatalf("unit %d: errors %v and %v", u, aerr, serr)
		}
		if !slices.Equal(a.addrs, s.addrs) || !slices.Equal(a.locs, s.locs) {
			t.Fatalf("unit %d: %d rows as they come, %d sorted, or they differ", u, len(a.addrs), len(s.addrs))
		}
		rows += len(a.addrs)
	}
	if rows < 100000 {
		t.Fatalf("only %d rows in libc6-dbg's line tables", rows)
	}
}

// TestLineRowsOutOfOrder: a program whose second sequence lies below the
// first gets the rows sorted.
func TestLineRowsOutOfOrder(t *testing.T) {
	addrs := []uint64{0x200, 0x210, 0x100, 0x100, 0x120}
	locs := []rowLoc{{1, 5}, {-1, -1}, {1, 7}, {-1, -1}, {1, 9}}
	sortRows(addrs, locs)
	wantA := []uint64{0x100, 0x100, 0x120, 0x200, 0x210}
	wantL := []rowLoc{{-1, -1}, {1, 7}, {1, 9}, {1, 5}, {-1, -1}}
	if !slices.Equal(addrs, wantA) || !slices.Equal(locs, wantL) {
		t.Fatalf("sorted %#x %v, want %#x %v", addrs, locs, wantA, wantL)
	}
}

// TestRowIndex: the bucketed search of a line table's addresses finds
// what the binary search finds, for addresses below, among, between and
// above the rows, on tables of dense, sparse, repeated and extreme
// addresses.
func TestRowIndex(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	tables := map[string][]uint64{}
	for _, c := range []struct {
		name      string
		n         int
		base, gap uint64
	}{{"dense", 100, 0x1000, 4}, {"sparse", 500, 0x400000, 1 << 20}, {"min", minIndexedRows, 0, 1}, {"high", 200, 1<<64 - 1<<20, 64}} {
		a := make([]uint64, c.n)
		v := c.base
		for i := range a {
			a[i] = v
			v += rng.Uint64N(c.gap + 1) // 0 repeats an address
		}
		tables[c.name] = a
	}
	split := make([]uint64, 0, 300) // hot and cold parts far apart
	for i := range 150 {
		split = append(split, 0x20000+uint64(i)*16)
	}
	for i := range 150 {
		split = append(split, 0x7000000+uint64(i)*8)
	}
	tables["split"] = split
	tables["one address"] = slices.Repeat([]uint64{0x5000}, 80)
	for name, a := range tables {
		x := newRowIndex(a)
		if x == nil {
			t.Fatalf("%s: no index for %d rows", name, len(a))
		}
		if len(x.first) > len(a)/2+1 {
			t.Errorf("%s: %d buckets for %d rows", name, len(x.first)-1, len(a))
		}
		pcs := []uint64{0, 1<<64 - 1, a[0] - 1, a[len(a)-1] + 1}
		for _, v := range a {
			pcs = append(pcs, v-1, v, v+1)
		}
		for range 2000 {
			pcs = append(pcs, a[0]+rng.Uint64N(a[len(a)-1]-a[0]+1))
		}
		for _, pc := range pcs {
			if got, want := x.search(a, pc), searchAddr(a, pc); got != want {
				t.Fatalf("%s: search(%#x) = %d, want %d", name, pc, got, want)
			}
		}
	}
	if newRowIndex(make([]uint64, minIndexedRows-1)) != nil {
		t.Error("an index for a small table")
	}
}
