package debuginfo

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/probekit/probekit/internal/safeelf"
)

// openFixtureELF opens a fixture as a safeelf.File (closed at the end of
// the test).
func openFixtureELF(t testing.TB, path string) (*os.File, *safeelf.File) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	ef, err := safeelf.NewFile(f)
	if err != nil {
		t.Fatal(err)
	}
	return f, ef
}

// textFrames is the chain of every address of file's .text by l.
func textFrames(t *testing.T, l *Lines, file string) [][]SourceFrame {
	lo, hi := textRange(t, file)
	var all [][]SourceFrame
	for a := lo; a < hi; a++ {
		fs, err := l.Frames(nil, a)
		if err != nil {
			t.Fatalf("%s %#x: %v", file, a, err)
		}
		all = append(all, fs)
	}
	return all
}

// TestLinesSup: lines_c_v5 after dwz -m (its shared entries and strings
// moved to a common file, with .gnu_debugaltlink and the GNU forms, and
// with dwz --dwarf-5's .debug_sup and DW_FORM_ref_sup4/strp_sup), its
// common file found by FindSup and given as LinesOptions.Sup, gives every
// address of .text the chain lines_c_v5 gives; without it, the names
// kept in the common file (inner, atoi, main) are missing.
func TestLinesSup(t *testing.T) {
	orig, err := OpenLines(elfSections(t, linesFixture("lines_c_v5")), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := textFrames(t, orig, linesFixture("lines_c_v5"))
	for _, c := range []struct {
		file   string
		dwarf5 bool
	}{{"lines_dwz", false}, {"lines_dwz5", true}} {
		t.Run(c.file, func(t *testing.T) {
			path := linesFixture(c.file)
			f, ef := openFixtureELF(t, path)
			link, err := ReadSupLink(ef)
			if err != nil || link == nil {
				t.Fatalf("ReadSupLink: %v, %v", link, err)
			}
			if link.Name != c.file+".sup" || link.DWARF5 != c.dwarf5 || len(link.ID) != 20 {
				t.Fatalf("link %+v", link)
			}
			sf, err := FindSup(&File{File: f, Path: path}, link, &Options{DebugDirs: []string{t.TempDir()}})
			if err != nil {
				t.Fatal(err)
			}
			defer sf.Close()
			if sf.Path != linesFixture(c.file+".sup") || sf.Source != SourceSup {
				t.Fatalf("found %s (%v)", sf.Path, sf.Source)
			}
			sef, err := safeelf.NewFile(sf)
			if err != nil {
				t.Fatal(err)
			}
			if l, err := ReadSupLink(sef); l != nil || err != nil {
				t.Fatalf("the common file's own link: %+v, %v", l, err)
			}
			sup, err := OpenLinesELF(sef, nil)
			if err != nil {
				t.Fatal(err)
			}
			l, err := OpenLinesELF(ef, &LinesOptions{Sup: sup})
			if err != nil {
				t.Fatal(err)
			}
			got := textFrames(t, l, path)
			inlined := 0
			for i := range want {
				if !slices.Equal(got[i], want[i]) {
					t.Fatalf("%#x: %v, lines_c_v5 %v", i, got[i], want[i])
				}
				inlined += max(len(got[i])-1, 0)
			}
			if inlined == 0 {
				t.Fatal("no inlined frame")
			}
			// Without the common file, the names there are missing.
			bare, err := OpenLinesELF(ef, nil)
			if err != nil {
				t.Fatal(err)
			}
			missing := map[string]bool{}
			for i, fs := range textFrames(t, bare, path) {
				for k, fr := range fs {
					if fr.Function == "" && k < len(want[i]) && want[i][k].Function != "" {
						missing[want[i][k].Function] = true
					}
				}
			}
			if !missing["inner"] {
				t.Errorf("without the common file, names missing: %v", missing)
			}
		})
	}
}

// TestFindSupRefuses: a common file of another build where the link
// points (the --dwarf-5 one under the GNU one's name, and the reverse),
// and a link naming the file itself, are refused with ErrMismatch
// warnings, and FindSup fails with ErrNoSup.
func TestFindSupRefuses(t *testing.T) {
	dir := t.TempDir()
	for _, c := range [][2]string{{"lines_dwz", "lines_dwz5.sup"}, {"lines_dwz5", "lines_dwz.sup"}} {
		for _, n := range []string{c[0], c[1]} {
			b, err := os.ReadFile(linesFixture(n))
			if err != nil {
				t.Fatal(err)
			}
			to := n
			if n == c[1] {
				to = c[0] + ".sup" // another build's under the recorded name
			}
			if err := os.WriteFile(filepath.Join(dir, to), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, name := range []string{"lines_dwz", "lines_dwz5"} {
		path := filepath.Join(dir, name)
		f, ef := openFixtureELF(t, path)
		link, err := ReadSupLink(ef)
		if err != nil || link == nil {
			t.Fatalf("%s: %v, %v", name, link, err)
		}
		var warns []error
		_, err = FindSup(&File{File: f, Path: path}, link, &Options{DebugDirs: []string{dir}, Warn: func(e error) { warns = append(warns, e) }})
		if !errors.Is(err, ErrNoSup) || len(warns) != 1 || !errors.Is(warns[0], ErrMismatch) {
			t.Errorf("%s: %v, warnings %v", name, err, warns)
		}
		self := *link
		self.Name = name
		if _, err := FindSup(&File{File: f, Path: path}, &self, &Options{DebugDirs: []string{dir}}); !errors.Is(err, ErrNoSup) {
			t.Errorf("%s naming itself: %v", name, err)
		}
	}
}

// TestFindSupByBuildID: a common file that is not where
// .gnu_debugaltlink's name says is found by its build ID under a debug
// directory.
func TestFindSupByBuildID(t *testing.T) {
	dir, debugDir := t.TempDir(), t.TempDir()
	path := filepath.Join(dir, "lines_dwz")
	b, err := os.ReadFile(linesFixture("lines_dwz"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o755); err != nil {
		t.Fatal(err)
	}
	f, ef := openFixtureELF(t, path)
	link, err := ReadSupLink(ef)
	if err != nil || link == nil {
		t.Fatalf("%v, %v", link, err)
	}
	id := fmt.Sprintf("%x", link.ID)
	at := filepath.Join(debugDir, ".build-id", id[:2], id[2:]+".debug")
	if err := os.MkdirAll(filepath.Dir(at), 0o755); err != nil {
		t.Fatal(err)
	}
	sup, err := os.ReadFile(linesFixture("lines_dwz.sup"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(at, sup, 0o644); err != nil {
		t.Fatal(err)
	}
	sf, err := FindSup(&File{File: f, Path: path}, link, &Options{DebugDirs: []string{debugDir}})
	if err != nil {
		t.Fatal(err)
	}
	defer sf.Close()
	if sf.Path != at {
		t.Fatalf("found %s, want %s", sf.Path, at)
	}
}
