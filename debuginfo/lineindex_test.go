package debuginfo

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"reflect"
	"testing"
)

// indexFixtures are the fixtures of TestLinesFixtures and the dwz ones,
// with the supplementary file each needs ("" for none).
var indexFixtures = []struct{ file, sup string }{
	{"lines_c_v4", ""}, {"lines_c_v5", ""}, {"lines_cc_v4", ""}, {"lines_cc_v5", ""},
	{"lines_rs", ""}, {"lines_c_split", ""},
	{"lines_dwz", "lines_dwz.sup"}, {"lines_dwz5", "lines_dwz5.sup"},
}

// openFixtureLines opens a fixture's DWARF as symbolize does
// (OpenLinesELF, with its supplementary file).
func openFixtureLines(t testing.TB, file, sup string) *Lines {
	var opts LinesOptions
	if sup != "" {
		_, sef := openFixtureELF(t, linesFixture(sup))
		s, err := OpenLinesELF(sef, nil)
		if err != nil {
			t.Fatal(err)
		}
		opts.Sup = s
	}
	_, ef := openFixtureELF(t, linesFixture(file))
	l, err := OpenLinesELF(ef, &opts)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// sameFrames compares the answers of the index and of the DWARF at pc.
func sameFrames(t *testing.T, x *LineIndex, l *Lines, pc uint64) bool {
	t.Helper()
	want, werr := l.Frames(nil, pc)
	got, gerr := x.Frames(nil, pc)
	if fmt.Sprint(werr) != fmt.Sprint(gerr) || !reflect.DeepEqual(got, want) {
		t.Errorf("%#x: index %+v (%v), DWARF %+v (%v)", pc, got, gerr, want, werr)
		return false
	}
	return true
}

// TestLineIndexSame: an index answers as the DWARF it was built from, at
// every address of every fixture's .text (C with inlining from a header,
// C++, Rust, DWARF 4 and 5, split DWARF, dwz with its common file) and
// at every bound of the index and the addresses next to it.
func TestLineIndexSame(t *testing.T) {
	for _, c := range indexFixtures {
		t.Run(c.file, func(t *testing.T) {
			l := openFixtureLines(t, c.file, c.sup)
			b, err := l.AppendIndex(nil, []byte("key"), nil)
			if err != nil {
				t.Fatal(err)
			}
			x, err := ReadLineIndex(b, []byte("key"))
			if err != nil {
				t.Fatal(err)
			}
			lo, hi := textRange(t, linesFixture(c.file))
			bad, framed := 0, 0
			for pc := lo; pc < hi && bad < 10; pc++ {
				if !sameFrames(t, x, l, pc) {
					bad++
				}
				if fs, _ := x.Frames(nil, pc); len(fs) > 1 {
					framed++
				}
			}
			for i := range x.nAddrs {
				a := binary.LittleEndian.Uint64(x.addrs[8*i:])
				for _, pc := range []uint64{a - 1, a, a + 1} {
					if bad < 10 && !sameFrames(t, x, l, pc) {
						bad++
					}
				}
			}
			if framed == 0 && c.file != "lines_c_split" {
				t.Errorf("no address of .text has inlined frames")
			}
			t.Logf("%d bytes of .text, %d intervals, %d bytes of index, %d addresses with inlined frames", hi-lo, x.Intervals(), x.Size(), framed)
		})
	}
}

// testSymbols is a symbol table of file's .symtab functions: At gives
// the function holding pc with the highest start.
func testSymbols(t *testing.T, file string) *IndexSymbols {
	syms := fixtureSymbols(t, file)
	var fs []elf.Symbol
	var bounds []uint64
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Value != 0 {
			fs = append(fs, s)
			bounds = append(bounds, s.Value, s.Value+max(s.Size, 1))
		}
	}
	return &IndexSymbols{Bounds: bounds, At: func(pc uint64) (string, uint64, bool) {
		best := -1
		for i, s := range fs {
			if pc >= s.Value && pc < s.Value+max(s.Size, 1) && (best < 0 || s.Value > fs[best].Value) {
				best = i
			}
		}
		if best < 0 {
			return "", 0, false
		}
		return fs[best].Name, fs[best].Value, true
	}}
}

// TestLineIndexSymbols: an index given a symbol table answers for it at
// every address of .text, and its frames stay the DWARF's.
func TestLineIndexSymbols(t *testing.T) {
	for _, c := range indexFixtures[:4] {
		l := openFixtureLines(t, c.file, c.sup)
		syms := testSymbols(t, linesFixture(c.file))
		b, err := l.AppendIndex(nil, nil, syms)
		if err != nil {
			t.Fatal(err)
		}
		x, err := ReadLineIndex(b, nil)
		if err != nil || !x.HasSymbols() {
			t.Fatalf("%s: %v, symbols %v", c.file, err, x != nil && x.HasSymbols())
		}
		lo, hi := textRange(t, linesFixture(c.file))
		named := 0
		for pc := lo; pc < hi; pc++ {
			fs, sym, ok, err := x.Lookup(nil, pc)
			name, start, wok := syms.At(pc)
			want, werr := l.Frames(nil, pc)
			if ok != wok || sym.Name != name || sym.Start != start || !reflect.DeepEqual(fs, want) || fmt.Sprint(err) != fmt.Sprint(werr) {
				t.Fatalf("%s %#x: symbol %v %v, want %q %#x %v; frames %+v, want %+v", c.file, pc, sym, ok, name, start, wok, fs, want)
			}
			if ok {
				named++
			}
		}
		if named == 0 {
			t.Errorf("%s: no address named", c.file)
		}
		// Locate and LookupInterval answer as Lookup, in batches
		// that cross every bound.
		var pcs []uint64
		for pc := lo; pc < hi; pc++ {
			pcs = append(pcs, pc)
		}
		pcs = append(pcs, 0, lo-1, hi, hi+1<<20, ^uint64(0))
		for len(pcs) > 0 {
			batch := pcs[:min(len(pcs), 300)]
			pcs = pcs[len(batch):]
			for k, i := range x.Locate(nil, batch) {
				fs, sym, ok, err := x.LookupInterval(nil, i)
				wfs, wsym, wok, werr := x.Lookup(nil, batch[k])
				if ok != wok || sym != wsym || !reflect.DeepEqual(fs, wfs) || fmt.Sprint(err) != fmt.Sprint(werr) {
					t.Fatalf("%s %#x: interval %d: %+v %v %v, Lookup %+v %v %v", c.file, batch[k], i, fs, sym, ok, wfs, wsym, wok)
				}
			}
		}
	}
}

// TestLineIndexLibc: the index of libc6-dbg's DWARF answers as the DWARF
// does at 20,000 random addresses of libc's .text (the symbolize command
// is compared on libc too: TestSymbolizeCache).
func TestLineIndexLibc(t *testing.T) {
	if testing.Short() {
		t.Skip("reads all of libc6-dbg's DWARF (-short)")
	}
	lib, debug := libcPaths(t)
	_, ef := openFixtureELF(t, debug)
	l, err := OpenLinesELF(ef, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := l.AppendIndex(nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	x, err := ReadLineIndex(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	lo, hi := textRange(t, lib)
	rng := rand.New(rand.NewPCG(5, 6))
	bad := 0
	for range 20000 {
		if !sameFrames(t, x, l, lo+rng.Uint64N(hi-lo)) {
			if bad++; bad >= 10 {
				t.Fatal("too many differences")
			}
		}
	}
	t.Logf("libc: %d intervals, %d bytes of index for %d bytes of DWARF sections", x.Intervals(), x.Size(), l.SectionBytes())
}

// fixtureIndex returns the index of lines_c_v5 with key "key".
func fixtureIndex(t testing.TB) []byte {
	l := openFixtureLines(t, "lines_c_v5", "")
	b, err := l.AppendIndex(nil, []byte("key"), nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// resum recomputes the checksum of an index changed in place.
func resum(b []byte) {
	n := len(b) - 4
	binary.LittleEndian.PutUint32(b[n:], crc32.Checksum(b[:n], castagnoli))
}

// TestLineIndexBad: a truncated or changed index, another key, another
// version are refused with what was wrong; so is one whose checksum was
// fixed after a change that breaks its structure.
func TestLineIndexBad(t *testing.T) {
	good := fixtureIndex(t)
	if _, err := ReadLineIndex(good, []byte("other")); !errors.Is(err, ErrIndexKey) {
		t.Errorf("another key: %v, want ErrIndexKey", err)
	}
	var ie *IndexError
	for _, n := range []int{0, 8, lineIndexHeader, len(good) / 2, len(good) - 1} {
		if _, err := ReadLineIndex(good[:n], []byte("key")); !errors.As(err, &ie) {
			t.Errorf("truncated to %d: %v, want an IndexError", n, err)
		}
	}
	for off := 0; off < len(good); off += 97 {
		b := append([]byte(nil), good...)
		b[off] ^= 0x40
		if _, err := ReadLineIndex(b, []byte("key")); err == nil {
			t.Errorf("byte %#x changed: accepted", off)
		}
	}
	b := append([]byte(nil), good...)
	binary.LittleEndian.PutUint32(b[8:], LineIndexVersion+1)
	if _, err := ReadLineIndex(b, []byte("key")); !errors.Is(err, ErrIndexKey) {
		t.Errorf("another version: %v, want ErrIndexKey", err)
	}
	// Structure broken, checksum fixed: each check says what failed.
	x, err := ReadLineIndex(good, []byte("key"))
	if err != nil {
		t.Fatal(err)
	}
	at := func(s []byte) int { return cap(good) - cap(s) }
	for _, c := range []struct {
		name string
		off  int
		v    uint32
	}{
		{"an interval out of order", at(x.addrs) + 8, 0},
		{"a bucket count", at(x.buckets) + 4, 1 << 30},
		{"a chain past the table", at(x.recs) + recSize, uint32(x.nChains)},
		{"a string past the bytes", at(x.recs) + 4, uint32(len(x.strBytes))},
		{"a frame's name past the bytes", at(x.frames), uint32(len(x.strBytes)) - 2},
		{"a frame's flags", at(x.frames) + 12, 7},
		{"a chain bound", at(x.chains) + 4, uint32(x.nFrames) + 1},
		{"a string's length", at(x.strBytes), uint32(len(x.strBytes))},
		{"the interval count", 16, uint32(x.nAddrs) + 1},
	} {
		b := append([]byte(nil), good...)
		binary.LittleEndian.PutUint32(b[c.off:], c.v)
		resum(b)
		if _, err := ReadLineIndex(b, []byte("key")); !errors.As(err, &ie) {
			t.Errorf("%s: %v, want an IndexError", c.name, err)
		} else {
			t.Logf("%s: %v", c.name, err)
		}
	}
}

// FuzzLineIndex: hostile line indexes, past the checksum and the key,
// through the reader and lookups around every interval: no panic, and
// nothing allocated by the counts (the tables are views of the input).
func FuzzLineIndex(f *testing.F) {
	f.Add(fixtureIndex(f))
	l := openFixtureLines(f, "lines_dwz", "lines_dwz.sup")
	b, err := l.AppendIndex(nil, nil, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Fuzz(func(t *testing.T, data []byte) {
		x, err := readLineIndex(data, nil, false)
		if err != nil {
			return
		}
		var buf []SourceFrame
		for i := range min(x.nAddrs, 4096) {
			a := binary.LittleEndian.Uint64(x.addrs[8*i:])
			for _, pc := range []uint64{a - 1, a, a + 1, ^uint64(0)} {
				buf, _ = x.Frames(buf[:0], pc)
			}
		}
	})
}
