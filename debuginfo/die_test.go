package debuginfo

import (
	"debug/dwarf"
	"slices"
	"testing"

	"github.com/probekit/probekit/internal/test/testkit"
)

// TestEntriesAgreeWithDebugDwarf: the entry reader (die.go) against
// debug/dwarf over the same sections, on every entry of the fixtures
// (C and C++, DWARF 4 and 5, Rust) and of libc6-dbg's libc: the tag,
// whether it has children, the address ranges (low/high pc, .debug_ranges,
// .debug_rnglists, rnglistx) and the name, linkage name and call site of
// each subprogram and inlined call.
func TestEntriesAgreeWithDebugDwarf(t *testing.T) {
	files := entryTestFiles(t)
	for _, file := range files {
		l, err := OpenLines(elfSections(t, file), nil)
		if err != nil {
			t.Fatal(err)
		}
		d, err := l.dwarfData()
		if err != nil {
			t.Fatal(err)
		}
		entries, code := 0, 0
		for i := range l.units {
			un := &l.units[i]
			r, err := l.reader(un)
			if err != nil {
				t.Fatalf("%s: unit %d: %v", file, i, err)
			}
			dr := d.Reader()
			dr.Seek(dwarf.Offset(un.die))
			for p := un.die; p < un.end; {
				var v dieVals
				if err := r.decode(p, &v); err != nil {
					t.Fatalf("%s: %#x: %v", file, p, err)
				}
				e, err := dr.Next()
				if err != nil || e == nil {
					t.Fatalf("%s: %#x: debug/dwarf: %v", file, p, err)
				}
				if e.Tag != 0 && int(e.Offset) != p {
					t.Fatalf("%s: entry at %#x, debug/dwarf's at %#x", file, p, e.Offset)
				}
				p = v.next
				entries++
				if v.ab == nil {
					if e.Tag != 0 {
						t.Fatalf("%s: %#x: null entry, debug/dwarf's tag %v", file, e.Offset, e.Tag)
					}
					continue
				}
				if dwarf.Tag(v.ab.tag) != e.Tag || v.ab.children != e.Children {
					t.Fatalf("%s: %#x: tag %#x children %v, debug/dwarf's %v %v", file, e.Offset, v.ab.tag, v.ab.children, e.Tag, e.Children)
				}
				if e.Tag != dwarf.TagSubprogram && e.Tag != dwarf.TagInlinedSubroutine && e.Tag != dwarf.TagCompileUnit {
					continue
				}
				want, werr := d.Ranges(e)
				got, gerr := r.ranges(nil, &v)
				if (werr == nil) != (gerr == nil) || !slices.Equal(got, want) {
					t.Fatalf("%s: %#x %v: ranges %#x (%v), debug/dwarf's %#x (%v)", file, e.Offset, e.Tag, got, gerr, want, werr)
				}
				if len(got) > 0 {
					code++
				}
				for _, c := range []struct {
					attr dwarf.Attr
					slot int
				}{{dwarf.AttrName, slotName}, {dwarf.AttrLinkageName, slotLinkage}} {
					if w, _ := e.Val(c.attr).(string); r.str(v.a[c.slot]) != w {
						t.Fatalf("%s: %#x: %v %q, debug/dwarf's %q", file, e.Offset, c.attr, r.str(v.a[c.slot]), w)
					}
				}
				for _, c := range []struct {
					attr dwarf.Attr
					slot int
				}{{dwarf.AttrCallFile, slotCallFile}, {dwarf.AttrCallLine, slotCallLine}} {
					if w, ok := e.Val(c.attr).(int64); ok && (v.a[c.slot].v != uint64(w) || !isConst(v.a[c.slot].form)) {
						t.Fatalf("%s: %#x: %v %d, debug/dwarf's %d", file, e.Offset, c.attr, v.a[c.slot].v, w)
					}
				}
			}
		}
		t.Logf("%s: %d entries, %d with code, agree", file, entries, code)
		if code == 0 {
			t.Fatalf("%s: no entry with code", file)
		}
	}
}

// TestSkipRunsReadTheSame: abbreviations whose runs of skipped
// fixed-size forms are one spec read every entry of the fixtures and of
// libc6-dbg's libc as the abbreviations with a spec per attribute do:
// the same kept attributes, the same next entry.
func TestSkipRunsReadTheSame(t *testing.T) {
	files := entryTestFiles(t)
	for _, file := range files {
		l, err := OpenLines(elfSections(t, file), nil)
		if err != nil {
			t.Fatal(err)
		}
		entries, specs, runSpecs := 0, 0, 0
		for i := range l.units {
			un := &l.units[i]
			runs, err1 := parseAbbrevsRuns(l.sec.abbrev, un.abbrOff, un, true)
			each, err2 := parseAbbrevsRuns(l.sec.abbrev, un.abbrOff, un, false)
			if err1 != nil || err2 != nil {
				t.Fatalf("%s: unit %d: %v, %v", file, i, err1, err2)
			}
			for c := range runs.byCode {
				runSpecs += len(runs.byCode[c].attrs)
				specs += len(each.byCode[c].attrs)
			}
			rr := dieReader{l: l, u: un, ab: runs, b: l.sec.info, end: un.end}
			re := dieReader{l: l, u: un, ab: each, b: l.sec.info, end: un.end}
			for p := un.die; p < un.end; entries++ {
				var dr, de dieVals
				err1, err2 := rr.decode(p, &dr), re.decode(p, &de)
				if (err1 == nil) != (err2 == nil) {
					t.Fatalf("%s: entry at %#x: %v, %v", file, p, err1, err2)
				}
				if err1 != nil {
					break
				}
				if dr.next != de.next || dr.a != de.a || (dr.ab == nil) != (de.ab == nil) || dr.ab != nil && (dr.ab.tag != de.ab.tag || dr.ab.children != de.ab.children) {
					t.Fatalf("%s: entry at %#x: next %#x %v, with a spec per attribute %#x %v", file, p, dr.next, dr.a, de.next, de.a)
				}
				p = dr.next
			}
		}
		t.Logf("%s: %d entries; %d specs, %d with runs", file, entries, specs, runSpecs)
		if runSpecs >= specs {
			t.Errorf("%s: runs made %d specs of %d", file, runSpecs, specs)
		}
	}
}

// entryTestFiles are the files whose every entry the entry tests read:
// the fixtures and, unless -short, libc6-dbg's libc.
func entryTestFiles(t *testing.T) []string {
	files := []string{linesFixture("lines_c_v4"), linesFixture("lines_c_v5"), linesFixture("lines_cc_v4"), linesFixture("lines_cc_v5"), linesFixture("lines_rs")}
	if !testing.Short() {
		files = append(files, testkit.LibcDebugFile(t))
	}
	return files
}
