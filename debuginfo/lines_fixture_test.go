package debuginfo

import (
	"debug/elf"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

func linesFixture(name string) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "testdata", "lines", "bin", name)
}

// fixtureSymbols returns file's .symtab.
func fixtureSymbols(t *testing.T, file string) []elf.Symbol {
	f, err := elf.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	return syms
}

// funcAddrs returns every address of the named functions of file (by
// .symtab), and up to n random ones of .text besides.
func funcAddrs(t *testing.T, file string, names []string, n int) []uint64 {
	syms := fixtureSymbols(t, file)
	var addrs []uint64
	for _, s := range syms {
		for _, want := range names {
			if s.Name == want || strings.HasPrefix(s.Name, want) && strings.Contains(want, "17h") {
				for a := s.Value; a < s.Value+s.Size; a++ {
					addrs = append(addrs, a)
				}
			}
		}
	}
	if len(addrs) == 0 {
		t.Fatalf("%s: none of %q", file, names)
	}
	lo, hi := textRange(t, file)
	rng := rand.New(rand.NewPCG(3, 4))
	for range n {
		addrs = append(addrs, lo+rng.Uint64N(hi-lo))
	}
	return addrs
}

// TestLinesFixtures: C, C++ and Rust built with -g -O2 (C and C++ in
// DWARF 4 and 5), every address of the functions with inlined calls and
// random others: what addr2line -f -i prints, and the inline chains the
// sources make (outer > mid > inner > scale in C, the last from a header;
// measure > twice > Square::area in C++; measure > area in Rust).
func TestLinesFixtures(t *testing.T) {
	for _, c := range []struct {
		file  string
		funcs []string
		chain []string // an inline chain some address must have, outermost last
		file0 string   // the innermost frame's file in that chain
	}{
		{"lines_c_v4", []string{"outer"}, []string{"scale", "inner", "mid", "outer"}, "lines_inline.h"},
		{"lines_c_v5", []string{"outer"}, []string{"scale", "inner", "mid", "outer"}, "lines_inline.h"},
		{"lines_cc_v4", []string{"_ZN6shapes7measureEi"}, []string{"_ZNK6shapes6Square4areaEv", "_ZN6shapes5twiceINS_6SquareEEEiRKT_", "_ZN6shapes7measureEi"}, "lines.cc"},
		{"lines_cc_v5", []string{"_ZN6shapes7measureEi"}, []string{"_ZNK6shapes6Square4areaEv", "_ZN6shapes5twiceINS_6SquareEEEiRKT_", "_ZN6shapes7measureEi"}, "lines.cc"},
		{"lines_rs", []string{"_ZN5lines7measure17h"}, nil, "lines.rs"},
	} {
		t.Run(c.file, func(t *testing.T) {
			path := linesFixture(c.file)
			l, err := OpenLines(elfSections(t, path), nil)
			if err != nil {
				t.Fatal(err)
			}
			addrs := funcAddrs(t, path, c.funcs, 2000)
			want := addr2line(t, path, addrs)
			var got []SourceFrame
			found, bad, symtab := false, 0, 0
			for i, a := range addrs {
				if got, err = l.Frames(got[:0], a); err != nil {
					t.Fatalf("%#x: %v", a, err)
				}
				if d := compareFrames(got, want[i]); d != "" {
					// As in TestLinesAgreeWithAddr2line: no DWARF function
					// (libstd's assembly, padding), named from the symbols.
					if len(want[i]) == 1 && (len(got) == 0 && want[i][0].line == 0 ||
						len(got) == 1 && got[0].Function == "" && got[0].Line == want[i][0].line) {
						symtab++
						continue
					}
					// addr2line names atoi, inlined into main from
					// stdlib.h in C++, "main" (eu-addr2line says atoi):
					// where the positions agree, eu-addr2line decides
					// the names of inlined frames.
					if positionsAgree(got, want[i]) && inlinedNamesAgree(got, euAddr2line(t, path, []uint64{a})[0]) {
						continue
					}
					if bad++; bad <= 10 {
						t.Errorf("%#x: %s", a, d)
					}
				}
				var names []string
				for _, f := range got {
					names = append(names, f.Function)
				}
				if c.chain != nil && slices.Equal(names, c.chain) && strings.HasSuffix(got[0].File, c.file0) {
					found = true
				}
				if c.chain == nil && len(got) > 1 && strings.HasSuffix(got[0].File, c.file0) && strings.Contains(got[len(got)-1].Function, "measure") {
					found = true
				}
			}
			t.Logf("%d addresses, %d differ, %d without a DWARF function", len(addrs), bad, symtab)
			if !found {
				t.Errorf("no address with the inline chain %q (innermost in %s)", c.chain, c.file0)
			}
		})
	}
}

func positionsAgree(got []SourceFrame, want []a2lFrame) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i].File != want[i].file || got[i].Line != want[i].line {
			return false
		}
	}
	return true
}

func inlinedNamesAgree(got []SourceFrame, eu []a2lFrame) bool {
	if len(got) != len(eu) {
		return false
	}
	for i := range got[:len(got)-1] {
		if got[i].Function != eu[i].fn {
			return false
		}
	}
	return true
}

// TestLinesSplitDWARF: a skeleton unit (gcc -gsplit-dwarf), its .dwo not
// read: file and line from the skeleton's line table, no function and no
// inlined frames (Lines documents it).
func TestLinesSplitDWARF(t *testing.T) {
	path := linesFixture("lines_c_split")
	l, err := OpenLines(elfSections(t, path), nil)
	if err != nil {
		t.Fatal(err)
	}
	addrs := funcAddrs(t, path, []string{"outer"}, 0)
	lined := 0
	for _, a := range addrs {
		got, err := l.Frames(nil, a)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) > 1 || len(got) == 1 && got[0].Function != "" {
			t.Fatalf("%#x: %+v, want no function from a skeleton unit", a, got)
		}
		if len(got) == 1 && got[0].Line > 0 && strings.HasSuffix(got[0].File, ".c") || len(got) == 1 && strings.HasSuffix(got[0].File, ".h") {
			lined++
		}
	}
	if lined == 0 {
		t.Fatalf("no address of outer has a line")
	}
}
