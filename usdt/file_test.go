package usdt

import (
	"debug/elf"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/internal/test/tools/golden/readelf"
)

func TestMain(m *testing.M) { os.Exit(testkit.RunWithLeakCheck(m)) }

func loadGolden(t *testing.T, name string) *readelf.Golden {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testkit.Root(), "testdata", "golden", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var g readelf.Golden
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	return &g
}

// flatLoc is one location as readelf shows a note.
type flatLoc struct {
	provider, name            string
	location, base, semaphore uint64
	args                      string
}

func flatten(f *File) []flatLoc {
	var out []flatLoc
	for _, p := range f.Probes {
		for _, l := range p.Locations {
			out = append(out, flatLoc{p.Provider, p.Name, l.Address, l.Base, l.Semaphore, l.ArgsSpec})
		}
	}
	return out
}

func goldenLocs(g *readelf.Golden) []flatLoc {
	var out []flatLoc
	for _, n := range g.Probes {
		out = append(out, flatLoc{n.Provider, n.Name, n.Location, n.Base, n.Semaphore, n.Args})
	}
	return out
}

func sortLocs(l []flatLoc) {
	sort.Slice(l, func(i, j int) bool {
		if l[i].location != l[j].location {
			return l[i].location < l[j].location
		}
		return l[i].provider+l[i].name < l[j].provider+l[j].name
	})
}

// goldenOffset translates addr through the golden's PT_LOADs, the oracle's
// view of the segments; exec selects the segments with the E flag.
func goldenOffset(t *testing.T, g *readelf.Golden, addr uint64, exec bool) uint64 {
	t.Helper()
	for _, s := range g.Segments {
		if s.Type != "LOAD" || addr < s.Vaddr || addr >= s.Vaddr+s.Memsz {
			continue
		}
		if strings.Contains(s.Flags, "E") != exec {
			t.Errorf("address %#x in segment %+v: exec=%v expected", addr, s, exec)
		}
		return addr - s.Vaddr + s.Offset
	}
	t.Errorf("address %#x in no golden PT_LOAD", addr)
	return 0
}

// checkAgainstGolden asserts that f lists exactly the notes of g, with
// file offsets that g's segments give.
func checkAgainstGolden(t *testing.T, f *File, g *readelf.Golden) {
	t.Helper()
	if got := f.Machine.String(); got != g.EMachine {
		t.Errorf("machine %s, golden %s", got, g.EMachine)
	}
	wantClass := map[string]elf.Class{"ELF32": elf.ELFCLASS32, "ELF64": elf.ELFCLASS64}[g.Class]
	if f.Class != wantClass {
		t.Errorf("class %v, golden %s", f.Class, g.Class)
	}
	if got := strings.ToLower(strings.TrimSuffix(f.ByteOrder.String(), "Endian")); got != g.Data {
		t.Errorf("byte order %v, golden %s", f.ByteOrder, g.Data)
	}
	got, want := flatten(f), goldenLocs(g)
	sortLocs(got)
	sortLocs(want)
	if len(got) != len(want) {
		t.Fatalf("%d locations, golden has %d", len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Errorf("location %d:\n got  %+v\n want %+v", i, got[i], want[i])
		}
	}
	for _, p := range f.Probes {
		for _, l := range p.Locations {
			if l.SiteErr != nil {
				t.Errorf("%s at %#x: %v", p.String(), l.Address, l.SiteErr)
				continue
			}
			if l.Site == SiteUnchecked || l.Site == SiteBad {
				t.Errorf("%s at %#x: site %v", p.String(), l.Address, l.Site)
			}
			if want := goldenOffset(t, g, l.Address, true); l.FileOffset != want {
				t.Errorf("%s at %#x: file offset %#x, golden segments give %#x", p.String(), l.Address, l.FileOffset, want)
			}
			if l.Semaphore != 0 {
				if want := goldenOffset(t, g, l.Semaphore, false); l.SemaphoreOffset != want {
					t.Errorf("%s semaphore %#x: file offset %#x, golden segments give %#x", p.String(), l.Semaphore, l.SemaphoreOffset, want)
				}
			} else if l.SemaphoreOffset != 0 {
				t.Errorf("%s: semaphore offset %#x without a semaphore", p.String(), l.SemaphoreOffset)
			}
		}
	}
}

// TestGoldens compares every fixture with its readelf golden: the seven
// architectures, -O0, stripped, without section headers, a library and its
// user.
func TestGoldens(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(testkit.Root(), "testdata", "golden", "*.json"))
	if err != nil || len(files) < 14 {
		t.Fatalf("goldens: %v, %d files (run `make testdata`)", err, len(files))
	}
	for _, gf := range files {
		name := strings.TrimSuffix(filepath.Base(gf), ".json")
		t.Run(name, func(t *testing.T) {
			g := loadGolden(t, name)
			path := testkit.Fixture(name)
			if _, err := os.Stat(path); err != nil {
				t.Skipf("%s not installed: %v", path, err)
			}
			f, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			if f.Path != path {
				t.Errorf("Path %q, want %q", f.Path, path)
			}
			checkAgainstGolden(t, f, g)
			for _, p := range f.Probes {
				for _, l := range p.Locations {
					if l.ArgsErr != nil {
						t.Errorf("%s: args %q: %v", p.String(), l.ArgsSpec, l.ArgsErr)
					}
				}
			}
		})
	}
}

// TestRealTargets runs readelf live on the real USDT users of Debian
// (python3.11 with semaphores, postgres with PC-relative operands, libjvm
// with 531 notes, libruby with argument-less probes) and compares: live,
// since their bytes change with each package update.
func TestRealTargets(t *testing.T) {
	for _, path := range []string{
		"/usr/bin/python3.11",
		"/usr/lib/postgresql/15/bin/postgres",
		"/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so",
		"/usr/lib/x86_64-linux-gnu/libruby-3.1.so.3.1.2",
	} {
		t.Run(filepath.Base(path), func(t *testing.T) {
			if _, err := os.Stat(path); err != nil {
				t.Skipf("%s not installed", path)
			}
			g, err := readelf.Read(path)
			if err != nil {
				t.Skipf("readelf: %v", err)
			}
			f, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			checkAgainstGolden(t, f, g)
		})
	}
}

func TestProbeModel(t *testing.T) {
	f, err := Open(testkit.Fixture("usdt_sample"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := f.Find("sample", "inlined")
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Locations) != 3 {
		t.Fatalf("sample:inlined has %d locations, want 3 (one per call site)", len(p.Locations))
	}
	seen := map[uint64]bool{}
	for _, l := range p.Locations {
		seen[l.Address] = true
		if len(l.Args) != 2 {
			t.Errorf("inlined at %#x: %d args, want 2", l.Address, len(l.Args))
		}
	}
	if len(seen) != 3 {
		t.Errorf("locations share addresses: %v", seen)
	}
	// Probes are one per provider:name.
	names := map[string]bool{}
	for _, p := range f.Probes {
		if names[p.String()] {
			t.Errorf("probe %s listed twice", p.String())
		}
		names[p.String()] = true
	}
	if len(f.Probes) != 10 {
		t.Errorf("%d probes, want 10: %v", len(f.Probes), names)
	}
	sema, err := f.Find("sample", "sema")
	if err != nil {
		t.Fatal(err)
	}
	if l := sema.Locations[0]; l.Semaphore == 0 || l.SemaphoreOffset == 0 || l.SemaphoreOffset%2 != 0 {
		t.Errorf("sample:sema semaphore %#x offset %#x", l.Semaphore, l.SemaphoreOffset)
	}
	twelve, _ := f.Find("sample", "twelve")
	if n := len(twelve.Locations[0].Args); n != 12 {
		t.Errorf("sample:twelve: %d args", n)
	}
	zero, _ := f.Find("", "zero")
	if zero == nil || zero.Locations[0].Args != nil || zero.Locations[0].ArgsErr != nil {
		t.Errorf("sample:zero: %+v", zero)
	}
}

func TestFindNotFound(t *testing.T) {
	f, err := Open(testkit.Fixture("usdt_sample"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range [][2]string{{"sample", "nope"}, {"other", "mem"}, {"", "nope"}} {
		if _, err := f.Find(c[0], c[1]); !errors.Is(err, ErrNotFound) {
			t.Errorf("Find(%q, %q) = %v, want ErrNotFound", c[0], c[1], err)
		}
	}
	f.Probes = append(f.Probes, Probe{Provider: "other", Name: "mem"})
	if _, err := f.Find("", "mem"); err == nil || errors.Is(err, ErrNotFound) {
		t.Errorf("ambiguous Find: %v", err)
	}
	if p, err := f.Find("other", "mem"); err != nil || p.Provider != "other" {
		t.Errorf("Find(other, mem) = %v, %v", p, err)
	}
}

func TestMatch(t *testing.T) {
	f := &File{Probes: []Probe{
		{Provider: "python", Name: "function__entry"},
		{Provider: "python", Name: "function__return"},
		{Provider: "python", Name: "gc__start"},
		{Provider: "ruby", Name: "gc__mark__begin"},
		{Provider: "hotspot", Name: "gc__begin"},
	}}
	for _, c := range []struct {
		glob string
		want []string
	}{
		{"python:function__*", []string{"python:function__entry", "python:function__return"}},
		{"*:gc__*", []string{"python:gc__start", "ruby:gc__mark__begin", "hotspot:gc__begin"}},
		{"gc__*", []string{"python:gc__start", "ruby:gc__mark__begin", "hotspot:gc__begin"}},
		{"python:gc__start", []string{"python:gc__start"}},
		{"?uby:*", []string{"ruby:gc__mark__begin"}},
		{"*:*_?egin", []string{"ruby:gc__mark__begin", "hotspot:gc__begin"}},
		{"*", []string{"python:function__entry", "python:function__return", "python:gc__start", "ruby:gc__mark__begin", "hotspot:gc__begin"}},
		{"python:", nil},
		{"nope:*", nil},
		{"[abc]", nil},
	} {
		var got []string
		for _, p := range f.Match(c.glob) {
			got = append(got, p.String())
		}
		if strings.Join(got, ",") != strings.Join(c.want, ",") {
			t.Errorf("Match(%q) = %v, want %v", c.glob, got, c.want)
		}
	}
}

func TestOpenErrors(t *testing.T) {
	if _, err := Open(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	notELF := filepath.Join(t.TempDir(), "text")
	os.WriteFile(notELF, []byte("#!/bin/sh\necho hello\n"), 0o644)
	var fe *FormatError
	if _, err := Open(notELF); !errors.As(err, &fe) || !strings.Contains(err.Error(), "not an ELF file") {
		t.Errorf("not ELF: %v", err)
	}
	if _, err := Open(testkit.Fixture("malloc_user")); !errors.Is(err, ErrNoProbes) {
		t.Errorf("no notes: %v", err)
	}
	if _, err := Open(testkit.Fixture("goprog")); !errors.Is(err, ErrNoProbes) {
		t.Errorf("Go binary: %v", err)
	}
}
