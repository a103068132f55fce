package debuginfo

import (
	"bytes"
	"os"
	"testing"

	"github.com/probekit/probekit/internal/safeelf"
	"github.com/probekit/probekit/internal/test/elfseed"
)

// frameAll looks up addresses of every unit range of l and around them.
func frameAll(l *Lines) {
	var buf []SourceFrame
	for i, r := range l.ranges {
		if i >= 256 {
			break
		}
		for _, a := range []uint64{r.lo, r.lo + 1, (r.lo + r.hi) / 2, r.hi - 1, r.hi} {
			buf, _ = l.Frames(buf[:0], a)
		}
	}
}

// FuzzLinesELF: hostile ELF files through OpenLinesELF, the entry point
// symbolize uses, and lookups of every unit's addresses: no panic, no
// unbounded allocation, errors located. The supplementary file given is
// dwz's for lines_dwz (references into it from hostile offsets), and
// ReadSupLink reads the file's link.
func FuzzLinesELF(f *testing.F) {
	f.Add(elfseed.DWARF())
	f.Add(elfseed.Compressed())
	for _, p := range []string{linesFixture("lines_c_v5"), linesFixture("lines_cc_v4"), "../testdata/debuginfo/bin/dbg_v5.zlib.debug", linesFixture("lines_dwz"), linesFixture("lines_dwz5")} {
		if b, err := os.ReadFile(p); err == nil && !elfseed.Fuzzing() {
			f.Add(b)
		}
	}
	_, sef := openFixtureELF(f, linesFixture("lines_dwz.sup"))
	sup, err := OpenLinesELF(sef, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ef, err := safeelf.NewFile(bytes.NewReader(data))
		if err != nil {
			return
		}
		ReadSupLink(ef)
		l, err := OpenLinesELF(ef, &LinesOptions{MaxBytes: 1 << 20, Sup: sup})
		if err != nil {
			return
		}
		frameAll(l)
	})
}

// FuzzLinesSections: hostile .debug_info, .debug_abbrev and .debug_line
// (the rest of a real file's sections kept), seeded from a DWARF 5
// fixture.
func FuzzLinesSections(f *testing.F) {
	sec := elfSections(f, linesFixture("lines_c_v5"))
	get := func(n string) []byte { b, _ := sec(n); return b }
	f.Add(get("info"), get("abbrev"), get("line"))
	sec4 := elfSections(f, linesFixture("lines_c_v4"))
	get4 := func(n string) []byte { b, _ := sec4(n); return b }
	f.Add(get4("info"), get4("abbrev"), get4("line"))
	f.Fuzz(func(t *testing.T, info, abbrev, line []byte) {
		l, err := OpenLines(func(n string) ([]byte, error) {
			switch n {
			case "info":
				return info, nil
			case "abbrev":
				return abbrev, nil
			case "line":
				return line, nil
			}
			return get(n), nil
		}, &LinesOptions{MaxBytes: 1 << 20})
		if err != nil {
			if _, ok := err.(*LinesError); !ok && err != ErrNoLines {
				t.Fatalf("unlocated error %T: %v", err, err)
			}
			return
		}
		frameAll(l)
	})
}
