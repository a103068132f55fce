package safeelf

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/probekit/probekit/internal/test/testkit"
)

const libc = "/usr/lib/x86_64-linux-gnu/libc.so.6"

// symbolFiles are the files whose symbols are checked against binutils:
// every fixture, the Go programs, and libc (versions).
func symbolFiles(tb testing.TB) []string {
	tb.Helper()
	files, err := filepath.Glob(filepath.Join(testkit.Root(), "testdata", "bin", "*"))
	if err != nil || len(files) == 0 {
		tb.Fatalf("no fixtures: %v", err)
	}
	if _, err := os.Stat(libc); err == nil {
		files = append(files, libc)
	}
	return files
}

func openFile(tb testing.TB, path string) *File {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	f, err := NewFile(bytes.NewReader(b))
	if err != nil {
		tb.Fatalf("%s: %v", path, err)
	}
	return f
}

func needTool(tb testing.TB, name string) {
	tb.Helper()
	if _, err := exec.LookPath(name); err != nil {
		testkit.Unavailable(tb, "%s: %v", name, err)
	}
}

// readelfSym is one line of readelf -sW.
type readelfSym struct {
	num                       int
	value, size               uint64
	typ, bind, vis, ndx, name string
}

// readelfLine: "  12: 0000000000001139    11 FUNC    GLOBAL DEFAULT   14 main",
// with ppc64's "[<localentry>: 8]" after the visibility, and a name that
// may contain spaces (Go's "go.shape.interface {}").
var readelfLine = regexp.MustCompile(`^\s*(\d+): ([0-9a-f]+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)(?:\s+\[[^\]]*\])?\s+(\S+) ?(.*)$`)

// readelfSymbols runs readelf -sW on path: the entries of each table by
// section name.
func readelfSymbols(tb testing.TB, path string) map[string][]readelfSym {
	tb.Helper()
	out, err := exec.Command("readelf", "-sW", path).Output()
	if err != nil {
		tb.Fatalf("readelf -sW %s: %v", path, err)
	}
	tables := map[string][]readelfSym{}
	table := ""
	header := regexp.MustCompile(`^Symbol table '([^']+)' contains \d+ entries:`)
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := header.FindStringSubmatch(line); m != nil {
			table = m[1]
			continue
		}
		m := readelfLine.FindStringSubmatch(line)
		if m == nil || table == "" {
			continue
		}
		num, _ := strconv.Atoi(m[1])
		value, _ := strconv.ParseUint(m[2], 16, 64)
		size, err := strconv.ParseUint(m[3], 0, 64)
		if err != nil {
			tb.Fatalf("readelf size %q: %v", m[3], err)
		}
		tables[table] = append(tables[table], readelfSym{num, value, size, m[4], m[5], m[6], m[7], m[8]})
	}
	return tables
}

var readelfTypes = map[elf.SymType]string{
	elf.STT_NOTYPE: "NOTYPE", elf.STT_OBJECT: "OBJECT", elf.STT_FUNC: "FUNC", elf.STT_SECTION: "SECTION",
	elf.STT_FILE: "FILE", elf.STT_COMMON: "COMMON", elf.STT_TLS: "TLS", elf.STT_GNU_IFUNC: "IFUNC",
}

var readelfBinds = map[elf.SymBind]string{
	elf.STB_LOCAL: "LOCAL", elf.STB_GLOBAL: "GLOBAL", elf.STB_WEAK: "WEAK", elf.SymBind(10): "UNIQUE", // STB_GNU_UNIQUE,
}

// readelfName spells a symbol's name as readelf -W does: name@@VERSION for
// a default version this file defines, name@VERSION for a hidden one, and
// name@VERSION (INDEX) for a version needed from another file.
func readelfName(f *File, s Symbol) string {
	switch {
	case s.Type == elf.STT_SECTION && s.Name == "" && int(s.Section) < len(f.Sections):
		return f.Sections[s.Section].Name // readelf names a section symbol after its section
	case s.Version == "" || s.Section == elf.SHN_ABS && s.Name == s.Version:
		return s.Name // nor for a version's own definition symbol
	case s.Library != "":
		return fmt.Sprintf("%s@%s (%d)", s.Name, s.Version, s.VersionIndex&^versionHidden)
	case s.VersionHidden:
		return s.Name + "@" + s.Version
	}
	return s.Name + "@@" + s.Version
}

func readelfNdx(s elf.SectionIndex) string {
	switch s {
	case elf.SHN_UNDEF:
		return "UND"
	case elf.SHN_ABS:
		return "ABS"
	case elf.SHN_COMMON:
		return "COM"
	}
	return strconv.Itoa(int(s))
}

// TestSymbolsMatchReadelf: every entry of every symbol table agrees with
// readelf -sW: value, size, type, binding, visibility, section, name and
// version, for ELF32 and ELF64 of both byte orders.
func TestSymbolsMatchReadelf(t *testing.T) {
	needTool(t, "readelf")
	for _, path := range symbolFiles(t) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			f := openFile(t, path)
			want := readelfSymbols(t, path)
			tables := 0
			for _, get := range []func() (*Symbols, error){f.Symbols, f.DynamicSymbols} {
				s, err := get()
				if err == ErrNoSymbols {
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				tables++
				w := want[s.Section.Name]
				if len(w) != s.Len() {
					t.Fatalf("%s: %d symbols, readelf %d", s.Section.Name, s.Len(), len(w))
				}
				for _, r := range w {
					got := s.Symbol(r.num)
					if s.Name(r.num) != got.Name {
						t.Errorf("%s %d: Name %q, Symbol.Name %q", s.Section.Name, r.num, s.Name(r.num), got.Name)
					}
					typ, ok := readelfTypes[got.Type]
					if !ok {
						typ = r.typ // processor-specific: readelf's spelling varies
					}
					vis := [...]string{"DEFAULT", "INTERNAL", "HIDDEN", "PROTECTED"}[got.Other&3]
					if got.Value != r.value || got.Size != r.size || typ != r.typ || readelfBinds[got.Bind] != r.bind ||
						vis != r.vis || (r.ndx != "UND" && r.ndx != "ABS" && r.ndx != "COM" && got.Section >= elf.SHN_LORESERVE) ||
						(got.Section < elf.SHN_LORESERVE || got.Section == elf.SHN_ABS || got.Section == elf.SHN_COMMON) && readelfNdx(got.Section) != r.ndx ||
						readelfName(f, got) != r.name {
						t.Errorf("%s %d: %+v, readelf %+v", s.Section.Name, r.num, got, r)
					}
				}
			}
			if tables == 0 && len(want) > 0 {
				t.Errorf("no table read, readelf shows %d", len(want))
			}
		})
	}
}

// nmFuncs runs nm -f sysv --defined-only (with -D for the dynamic
// symbols) and returns its FUNC entries as "name@address".
func nmFuncs(tb testing.TB, path string, dynamic bool) []string {
	tb.Helper()
	args := []string{"-f", "sysv", "--defined-only"}
	if dynamic {
		args = append(args, "-D")
	}
	out, err := exec.Command("nm", append(args, path)...).Output()
	if err != nil {
		return nil // no symbols
	}
	var fns []string
	for _, line := range strings.Split(string(out), "\n") {
		fields := strings.Split(line, "|")
		if len(fields) != 7 || strings.TrimSpace(fields[3]) != "FUNC" {
			continue
		}
		fns = append(fns, strings.TrimSpace(fields[0])+"@"+strings.TrimLeft(strings.TrimSpace(fields[1]), "0"))
	}
	return fns
}

// TestFunctionsMatchNm: the functions are the FUNC symbols nm lists, those
// in code, each (name, address) once.
func TestFunctionsMatchNm(t *testing.T) {
	needTool(t, "nm")
	for _, path := range symbolFiles(t) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			f := openFile(t, path)
			fns, err := f.Functions()
			if err != nil {
				t.Fatal(err)
			}
			loads := f.Loads()
			want := map[string]bool{}
			for _, dynamic := range []bool{false, true} {
				for _, s := range nmFuncs(t, path, dynamic) {
					at := strings.LastIndexByte(s, '@')
					name, addr := s[:at], s[at+1:]
					if dynamic { // nm -D spells versions: keep the name
						name, _, _ = strings.Cut(name, "@")
					}
					a, _ := strconv.ParseUint("0"+addr, 16, 64)
					if _, ok := loads.CodeOffset(a); ok {
						want[fmt.Sprintf("%s@%x", name, a)] = true
					}
				}
			}
			got := map[string]bool{}
			prev := uint64(0)
			for i := range fns.Len() {
				fn := fns.Func(i)
				key := fmt.Sprintf("%s@%x", fn.Name, fn.Address)
				if got[key] {
					t.Errorf("%s listed twice", key)
				}
				got[key] = true
				if fn.Address < prev {
					t.Errorf("%s out of address order", key)
				}
				prev = fn.Address
				if fn.Name != fns.Name(i) || fn.Address != fns.Address(i) {
					t.Errorf("%d: Func %s, Name %s Address %#x", i, key, fns.Name(i), fns.Address(i))
				}
			}
			if fns.Go == nil {
				for k := range want {
					if !got[k] {
						t.Errorf("nm lists %s, Functions does not", k)
					}
				}
			}
			for k := range got {
				if !want[k] && fns.Go == nil {
					t.Errorf("Functions lists %s, nm does not", k)
				}
			}
		})
	}
}

// TestFunctionLookups: by name, by glob, by address, on every fixture.
func TestFunctionLookups(t *testing.T) {
	for _, path := range symbolFiles(t) {
		f := openFile(t, path)
		fns, err := f.Functions()
		if err != nil {
			t.Fatal(err)
		}
		for i := range fns.Len() {
			fn := fns.Func(i)
			found := false
			fns.Lookup(fn.Name, func(j int) bool {
				found = found || j == i
				if fns.Name(j) != fn.Name {
					t.Errorf("%s: Lookup(%s) gave %s", path, fn.Name, fns.Name(j))
				}
				return true
			})
			if !found {
				t.Errorf("%s: Lookup(%q) misses function %d", path, fn.Name, i)
			}
			j, ok := fns.At(fn.Address)
			if !ok || fns.Address(j) != fn.Address {
				t.Errorf("%s: At(%#x) = %d %v, want a function at that address", path, fn.Address, j, ok)
			}
			if fn.Size > 1 {
				if j, ok := fns.At(fn.Address + fn.Size - 1); !ok || fns.Address(j) > fn.Address+fn.Size-1 || fns.Address(j) < fn.Address && fns.Func(j).Size == 0 {
					t.Errorf("%s: At(end of %s) = %d %v", path, fn, j, ok)
				}
			}
			if off, ok := f.Loads().CodeOffset(fn.Address); !ok || off != fn.Offset {
				t.Errorf("%s: %s offset %#x, CodeOffset %#x %v", path, fn, fn.Offset, off, ok)
			}
			if a, ok := f.Loads().Address(fn.Offset, true); !ok || a != fn.Address {
				t.Errorf("%s: %s Address(%#x) = %#x %v", path, fn, fn.Offset, a, ok)
			}
		}
		n := 0
		fns.Match("", func(int) bool { n++; return true })
		if n != fns.Len() {
			t.Errorf("%s: Match(\"\") = %d of %d", path, n, fns.Len())
		}
	}
}

func TestLibcVersions(t *testing.T) {
	if _, err := os.Stat(libc); err != nil {
		testkit.Unavailable(t, "%s: %v", libc, err)
	}
	f := openFile(t, libc)
	fns, err := f.Functions()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	fns.Match("realpath@*", func(i int) bool { got = append(got, fns.Func(i).String()); return true })
	slices.Sort(got)
	if want := []string{"realpath@@GLIBC_2.3", "realpath@GLIBC_2.2.5"}; !slices.Equal(got, want) {
		t.Errorf("Match(realpath@*) = %q, want %q", got, want)
	}
	got = got[:0]
	fns.Match("malloc@@GLIBC_2.2.?", func(i int) bool { got = append(got, fns.Func(i).String()); return true })
	if want := []string{"malloc@@GLIBC_2.2.5"}; !slices.Equal(got, want) {
		t.Errorf("Match(malloc@@GLIBC_2.2.?) = %q", got)
	}
	got = got[:0]
	fns.Match("mall*", func(i int) bool { got = append(got, fns.Name(i)); return true })
	if !slices.Contains(got, "malloc") || slices.ContainsFunc(got, func(s string) bool { return !strings.HasPrefix(s, "mall") }) {
		t.Errorf("Match(mall*) = %q", got)
	}
	dyn, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]elf.SymType{}
	dyn.Lookup("memcpy", func(i int) bool {
		s := dyn.Symbol(i)
		kinds[readelfName(f, s)] = s.Type
		return true
	})
	if kinds["memcpy@@GLIBC_2.14"] != elf.STT_GNU_IFUNC || kinds["memcpy@GLIBC_2.2.5"] != elf.STT_FUNC {
		t.Errorf("memcpy versions: %v", kinds)
	}
}

// TestGoTable: the stripped Go fixture's .gopclntab gives the addresses
// the unstripped one's .symtab gives, and lines for them.
func TestGoTable(t *testing.T) {
	full := openFile(t, testkit.Fixture("goprog"))
	stripped := openFile(t, testkit.Fixture("goprog_stripped"))
	ffns, err := full.Functions()
	if err != nil {
		t.Fatal(err)
	}
	sfns, err := stripped.Functions()
	if err != nil {
		t.Fatal(err)
	}
	if ffns.Go != nil || sfns.Go == nil || sfns.Symtab != nil {
		t.Fatalf("full: go table %v; stripped: go table %v, symtab %v", ffns.Go != nil, sfns.Go != nil, sfns.Symtab != nil)
	}
	for _, name := range []string{"main.add", "main.main", "runtime.main"} {
		var a, b Func
		ffns.Lookup(name, func(i int) bool { a = ffns.Func(i); return false })
		sfns.Lookup(name, func(i int) bool { b = sfns.Func(i); return false })
		if a.Address == 0 || a.Address != b.Address || a.Offset != b.Offset || b.Source != SourcePCLNTab || b.Size < a.Size {
			t.Errorf("%s: symtab %+v, pclntab %+v", name, a, b)
		}
		file, line, fn := sfns.Go.LineAt(b.Address)
		if fn != name || line == 0 || file == "" {
			t.Errorf("LineAt(%s) = %s:%d %s", name, file, line, fn)
		}
		if i, ok := sfns.At(b.Address + 1); !ok || sfns.Name(i) != name {
			t.Errorf("At(%s+1) = %d %v", name, i, ok)
		}
	}
	if _, _, fn := sfns.Go.LineAt(1); fn != "" {
		t.Errorf("LineAt(1) = %s", fn)
	}
}
