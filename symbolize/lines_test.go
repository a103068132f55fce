package symbolize

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/probekit/probekit/debuginfo"
)

const libcPath = "/lib/x86_64-linux-gnu/libc.so.6"

// TestSymbolizeAgreesWithAddr2line: a File over libc.so.6 finds
// libc6-dbg's debug file by build ID and names 5,000 random .text
// addresses as addr2line -f -i does: function, file, line, inline chain.
// Explained differences, counted: file names are compared cleaned
// (addr2line prints "./malloc/./malloc/malloc.c"); where no DWARF
// function covers an address both take the symbol table, where addr2line
// picks another alias of the same address or, in the padding after a
// function, the symbol before it (symbolize names none); addr2line 2.40
// names the unit's primary file for some DWARF 5 rows
// (debuginfo.TestLinesAgreeWithAddr2line checks those against
// eu-addr2line).
func TestSymbolizeAgreesWithAddr2line(t *testing.T) {
	if _, err := exec.LookPath("addr2line"); err != nil {
		t.Fatal(err)
	}
	ef, err := elf.Open(libcPath)
	if err != nil {
		t.Skipf("no libc: %v", err)
	}
	text := ef.Section(".text")
	lo, hi := text.Addr, text.Addr+text.Size
	ef.Close()
	if _, err := os.Stat("/usr/lib/debug/.build-id"); err != nil && os.Getenv("PROBEKIT_REQUIRE_KERNEL") == "" {
		t.Skip("libc6-dbg not installed")
	}
	f, err := New(nil).File(libcPath)
	if err != nil {
		t.Fatal(err)
	}
	syms := libcSymbols(t)
	rng := rand.New(rand.NewPCG(5, 6))
	addrs := make([]uint64, 5000)
	var in bytes.Buffer
	for i := range addrs {
		addrs[i] = lo + rng.Uint64N(hi-lo)
		fmt.Fprintf(&in, "%#x\n", addrs[i])
	}
	cmd := exec.Command("addr2line", "-a", "-f", "-i", "-e", libcPath)
	cmd.Stdin = &in
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	var frames []Frame
	k, inlined, aliases, padding, otherFile, bad := 0, 0, 0, 0, 0, 0
	for _, a := range addrs {
		if lines[k] != fmt.Sprintf("0x%016x", a) {
			t.Fatalf("addr2line line %d: %q", k, lines[k])
		}
		k++
		type fr struct {
			fn, file string
			line     int
		}
		var want []fr
		for k+1 < len(lines) && !strings.HasPrefix(lines[k], "0x") {
			loc, _, _ := strings.Cut(lines[k+1], " (discriminator")
			i := strings.LastIndexByte(loc, ':')
			w := fr{fn: lines[k], file: loc[:i]}
			w.line, _ = strconv.Atoi(loc[i+1:])
			if w.file == "??" || w.file == "" {
				w.file = ""
			} else {
				w.file = path.Clean(w.file)
			}
			want = append(want, w)
			k += 2
		}
		frames = f.Frames(frames[:0], a)
		inlined += len(frames) - 1
		if len(frames) != len(want) {
			bad++
			t.Errorf("%#x: %v, addr2line %v", a, frames, want)
			continue
		}
		for i, g := range frames {
			w := want[i]
			switch {
			case g.Function == w.fn && g.File == w.file && g.Line == w.line:
			case g.Function == w.fn && g.Line == w.line:
				otherFile++
			case i == len(frames)-1 && g.Function != "" && syms[g.Function] == syms[w.fn] && syms[w.fn].value != 0:
				aliases++
			case i == len(frames)-1 && g.Function == "" && syms[w.fn].value != 0 && syms[w.fn].value+syms[w.fn].size <= a:
				padding++
			default:
				bad++
				t.Errorf("%#x frame %d: %v, addr2line %v", a, i, g, w)
			}
		}
		if bad > 20 {
			t.FailNow()
		}
	}
	t.Logf("%d addresses, %d inlined frames; %d aliases, %d in padding, %d other DWARF 5 files, %d differ", len(addrs), inlined, aliases, padding, otherFile, bad)
	if inlined < len(addrs)/10 {
		t.Errorf("only %d inlined frames", inlined)
	}
}

type symAt struct{ value, size uint64 }

// libcSymbols maps the debug file's function names to their addresses.
func libcSymbols(t *testing.T) map[string]symAt {
	out, err := exec.Command("sh", "-c", "nm -S --defined-only /usr/lib/debug/.build-id/*/$(readelf -n "+libcPath+" | awk '/Build ID/{print substr($3,3)}').debug").Output()
	if err != nil {
		t.Fatalf("nm: %v", err)
	}
	m := map[string]symAt{}
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) == 4 && strings.ContainsAny(f[2], "TtWwi") {
			v, _ := strconv.ParseUint(f[0], 16, 64)
			s, _ := strconv.ParseUint(f[1], 16, 64)
			m[f[3]] = symAt{v, s}
		}
	}
	return m
}

// TestFramesDwz: a file whose DWARF went through dwz -m (the common
// file, found by the name its .gnu_debugaltlink or .debug_sup records,
// holds the names of inlined functions) gives every address of .text the
// frames of the same file before dwz (lines_c_v5); a common file of
// another build in its place is refused with a warning, and the names
// there are then missing.
func TestFramesDwz(t *testing.T) {
	dir := filepath.Join("..", "testdata", "lines", "bin")
	ef, err := elf.Open(filepath.Join(dir, "lines_c_v5"))
	if err != nil {
		t.Fatal(err)
	}
	text := ef.Section(".text")
	ef.Close()
	frames := func(f *File) [][]Frame {
		var all [][]Frame
		for a := text.Addr; a < text.Addr+text.Size; a++ {
			fs := f.Frames(nil, a)
			for i := range fs {
				fs[i].Object = ""
			}
			all = append(all, fs)
		}
		return all
	}
	orig, err := New(nil).File(filepath.Join(dir, "lines_c_v5"))
	if err != nil {
		t.Fatal(err)
	}
	want := frames(orig)
	for _, name := range []string{"lines_dwz", "lines_dwz5"} {
		var warns []error
		s := New(&Options{DebugInfo: debuginfo.Options{Warn: func(e error) { warns = append(warns, e) }}})
		f, err := s.File(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		got := frames(f)
		inlined := 0
		for i := range want {
			if !slices.Equal(got[i], want[i]) {
				t.Fatalf("%s %#x: %v, before dwz %v", name, text.Addr+uint64(i), got[i], want[i])
			}
			inlined += len(got[i]) - 1
		}
		if inlined == 0 || len(warns) > 0 {
			t.Errorf("%s: %d inlined frames, warnings %v", name, inlined, warns)
		}
	}
	// Another build's common file under the recorded name.
	tmp := t.TempDir()
	for from, to := range map[string]string{"lines_dwz": "lines_dwz", "lines_dwz5.sup": "lines_dwz.sup"} {
		b, err := os.ReadFile(filepath.Join(dir, from))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tmp, to), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var warns []error
	f, err := New(&Options{DebugInfo: debuginfo.Options{Warn: func(e error) { warns = append(warns, e) }, DebugDirs: []string{tmp}}}).File(filepath.Join(tmp, "lines_dwz"))
	if err != nil {
		t.Fatal(err)
	}
	unnamed := 0
	for _, fs := range frames(f) {
		for _, fr := range fs {
			if fr.Function == "" {
				unnamed++
			}
		}
	}
	if len(warns) != 1 || !errors.Is(warns[0], debuginfo.ErrMismatch) || unnamed == 0 {
		t.Errorf("another build's common file: warnings %v, %d unnamed frames", warns, unnamed)
	}
}
