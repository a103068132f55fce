package uprobe

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/probekit/probekit/internal/test/testkit"
)

// objdumpReturns disassembles path's executable sections with tool and
// returns the addresses of every return instruction ("ret", "retq",
// "retaa", "retab", with any prefix such as "repz" or "bnd").
func objdumpReturns(tb testing.TB, tool, path string) map[uint64]bool {
	tb.Helper()
	rets := make(map[uint64]bool)
	forEachInsn(objdump(tb, tool, path), func(addr uint64, text string) {
		fields := strings.Fields(text)
		for len(fields) > 0 && slices.Contains([]string{"repz", "rep", "bnd", "notrack", "ds", "cs"}, fields[0]) {
			fields = fields[1:]
		}
		if len(fields) > 0 && slices.Contains([]string{"ret", "retq", "retaa", "retab"}, fields[0]) {
			rets[addr] = true
		}
	})
	return rets
}

// objdump disassembles path's executable sections with tool (skipping the
// test when the tool is missing).
func objdump(tb testing.TB, tool, path string) []byte {
	tb.Helper()
	bin, err := exec.LookPath(tool)
	if err != nil {
		testkit.Unavailable(tb, "%s: %v", tool, err)
	}
	out, err := exec.Command(bin, "-d", "--no-show-raw-insn", "-w", path).Output()
	if err != nil {
		tb.Fatalf("%s -d %s: %v", tool, path, err)
	}
	return out
}

// forEachInsn calls f with the address and text of every instruction line
// of objdump output ("  4adda0:\ttest   %rax,%rax").
func forEachInsn(out []byte, f func(addr uint64, text string)) {
	walkObjdump(out, nil, f)
}

// walkObjdump calls onFunc (when not nil) with the address of every symbol
// header ("00000000004ade00 <main.recurse>:") and onInsn with every
// instruction line, in order.
func walkObjdump(out []byte, onFunc func(start uint64), onInsn func(addr uint64, text string)) {
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if onFunc != nil && strings.HasSuffix(line, ">:") {
			if a, err := strconv.ParseUint(strings.Fields(line)[0], 16, 64); err == nil {
				onFunc(a)
			}
			continue
		}
		colon := strings.Index(line, ":\t")
		if colon < 0 {
			continue
		}
		addr, err := strconv.ParseUint(strings.TrimSpace(line[:colon]), 16, 64)
		if err != nil {
			continue
		}
		onInsn(addr, strings.TrimSpace(line[colon+2:]))
	}
}

// compareWithObjdump checks, for every sized function of path, that the
// scanner finds exactly the return instructions objdump prints inside it.
func compareWithObjdump(t *testing.T, tool, path string, minFuncs int) {
	b := mustOpen(t, path)
	rets := objdumpReturns(t, tool, path)
	compared, withGaps := 0, 0
	for _, fn := range b.Functions("") {
		if fn.Size == 0 {
			continue
		}
		scan, err := b.ReturnSites(fn)
		if err != nil {
			t.Fatal(err)
		}
		if b.Machine() != elf.EM_AARCH64 && len(scan.Gaps) > 0 {
			// objdump prints "(bad)" there and resynchronises its own way;
			// such functions are never attached, so they are not compared.
			// (arm64 gaps are single words and do not disturb the rest.)
			withGaps++
			continue
		}
		var want []uint64
		for a := range rets {
			if a >= fn.Address && a < fn.Address+fn.Size {
				want = append(want, a-fn.Address)
			}
		}
		slices.Sort(want)
		got, certain := scan.Returns()
		if !certain || !slices.Equal(got, want) {
			t.Errorf("%s %s: scanner returns %#x (certain %v), objdump %#x", path, fn, got, certain, want)
		}
		compared++
	}
	if compared < minFuncs {
		t.Errorf("%s: compared %d functions, want at least %d", path, compared, minFuncs)
	}
	t.Logf("%s: %d functions agree with %s (%d with undecodable bytes skipped)", path, compared, tool, withGaps)
}

// objdumpStarts returns the address of every instruction objdump prints.
func objdumpStarts(tb testing.TB, path string) map[uint64]bool {
	tb.Helper()
	starts := make(map[uint64]bool)
	forEachInsn(objdump(tb, "objdump", path), func(addr uint64, _ string) { starts[addr] = true })
	return starts
}

// TestInstructionBoundariesObjdump checks every x86 instruction length the
// scan uses, not only where RETs are: a decoder that overstates one length
// silently skips the next instruction (x86asm does with VZEROUPPER).
func TestInstructionBoundariesObjdump(t *testing.T) {
	paths := []string{goprog, mallocUser}
	if !testing.Short() {
		paths = append(paths, libc)
	}
	for _, path := range paths {
		needFile(t, path)
		starts := objdumpStarts(t, path)
		b := mustOpen(t, path)
		checked := 0
		for _, fn := range b.Functions("") {
			if fn.Size == 0 || !starts[fn.Address] {
				continue
			}
			code, err := b.readCode(fn.Offset, fn.Size)
			if err != nil {
				t.Fatal(err)
			}
			walkX86(code, 64, func(in insn) {
				if in.gap || in.uncertain || in.off+in.n >= len(code) {
					return
				}
				checked++
				if next := fn.Address + uint64(in.off+in.n); !starts[next] {
					t.Errorf("%s %s+%#x: decoded length %d (% x) ends where objdump has no instruction",
						path, fn, in.off, in.n, code[in.off:in.off+in.n])
				}
			})
		}
		t.Logf("%s: %d instruction lengths agree with objdump", path, checked)
	}
}

func TestReturnSitesObjdump(t *testing.T) {
	t.Run("go-amd64", func(t *testing.T) { compareWithObjdump(t, "objdump", goprog, 1000) })
	t.Run("c-endbr64", func(t *testing.T) { compareWithObjdump(t, "objdump", mallocUser, 3) })
	t.Run("go-arm64", func(t *testing.T) { compareWithObjdump(t, "aarch64-linux-gnu-objdump", goprogARM64, 1000) })
	t.Run("libc", func(t *testing.T) {
		if testing.Short() {
			t.Skip("disassembles all of libc")
		}
		needFile(t, libc)
		compareWithObjdump(t, "objdump", libc, 1000)
	})
}

func TestReturnSitesFixture(t *testing.T) {
	b := mustOpen(t, goprog)
	for _, tc := range []struct {
		fn      string
		returns int
	}{
		{"main.add", 1},
		{"main.classify", 4},
		{"main.pair", 2},
	} {
		fn, err := b.Function(tc.fn)
		if err != nil {
			t.Fatal(err)
		}
		scan, err := b.ReturnSites(fn)
		if err != nil {
			t.Fatal(err)
		}
		got, certain := scan.Returns()
		if len(got) != tc.returns || !certain {
			t.Errorf("%s: returns %#x certain %v, want %d", tc.fn, got, certain, tc.returns)
		}
	}

	// The C fixture's classify starts with ENDBR64: the first instruction
	// after it is at +4, and its returns are found.
	c := mustOpen(t, mallocUser)
	fn, err := c.Function("classify")
	if err != nil {
		t.Fatal(err)
	}
	code, err := c.readCode(fn.Offset, fn.Size)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(code, endbr64) {
		t.Fatalf("classify starts with % x, want ENDBR64 (build with -fcf-protection)", code[:4])
	}
	if !instructionBoundary(elf.EM_X86_64, code, 4) || instructionBoundary(elf.EM_X86_64, code, 1) {
		t.Error("ENDBR64 not stepped over as 4 bytes")
	}
}

func TestReturnSitesSynthetic(t *testing.T) {
	x86 := []struct {
		name  string
		code  []byte
		sites []Site
		gaps  []Gap
	}{
		{"endbr ret", []byte{0xf3, 0x0f, 0x1e, 0xfa, 0xc3}, []Site{{Offset: 4, Kind: Return}}, nil},
		{"ret imm16, rep ret, bnd ret", []byte{0xc2, 0x08, 0x00, 0xf3, 0xc3, 0xf2, 0xc3},
			[]Site{{0, Return, false}, {3, Return, false}, {5, Return, false}}, nil},
		{"tail call out", []byte{0x90, 0xe9, 0x00, 0x10, 0x00, 0x00}, []Site{{1, TailCall, false}}, nil},
		{"jump inside", []byte{0xeb, 0x00, 0xc3}, []Site{{2, Return, false}}, nil},
		{"indirect", []byte{0xff, 0xe0, 0x3e, 0xff, 0xe0}, []Site{{0, IndirectJump, false}, {2, IndirectJump, false}}, nil},
		// 0x06 (push es) is invalid in 64-bit mode: a gap, and the RET
		// after it is uncertain.
		{"gap", []byte{0x90, 0x06, 0x06, 0xc3}, []Site{{3, Return, true}}, []Gap{{1, 2}}},
		// x86asm alone reads c5 f8 77 48 31 as one instruction.
		{"vzeroupper then xor, ret", []byte{0xc5, 0xf8, 0x77, 0x48, 0x31, 0xc0, 0xc3}, []Site{{6, Return, false}}, nil},
		{"vzeroupper (VEX3) then jmp out", []byte{0xc4, 0xe1, 0x78, 0x77, 0xe9, 0, 0, 0, 0}, []Site{{4, TailCall, false}}, nil},
		{"truncated", []byte{0xc3, 0x48}, []Site{{0, Return, false}}, []Gap{{1, 1}}},
	}
	for _, tc := range x86 {
		s, err := ReturnSites(elf.EM_X86_64, tc.code)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(s.Sites, tc.sites) || !slices.Equal(s.Gaps, tc.gaps) {
			t.Errorf("x86 %s: sites %+v gaps %+v, want %+v %+v", tc.name, s.Sites, s.Gaps, tc.sites, tc.gaps)
		}
	}

	words := func(ws ...uint32) []byte {
		out := make([]byte, 4*len(ws))
		for i, w := range ws {
			binary.LittleEndian.PutUint32(out[4*i:], w)
		}
		return out
	}
	arm := []struct {
		name  string
		code  []byte
		sites []Site
		gaps  []Gap
	}{
		{"ret", words(0xd503201f, 0xd65f03c0), []Site{{4, Return, false}}, nil},
		{"retaa retab", words(0xd65f0bff, 0xd65f0fff), []Site{{0, Return, false}, {4, Return, false}}, nil},
		{"b out, b.eq in", words(0x14000100, 0x54000020, 0xd65f03c0), []Site{{0, TailCall, false}, {8, Return, false}}, nil},
		{"br x16", words(0xd61f0200), []Site{{0, IndirectJump, false}}, nil},
		// An unknown word is skipped without doubt on what follows.
		{"undefined word", words(0x00000000, 0xd65f03c0), []Site{{4, Return, false}}, []Gap{{0, 4}}},
		{"trailing bytes", append(words(0xd65f03c0), 1, 2), []Site{{0, Return, false}}, []Gap{{4, 2}}},
	}
	for _, tc := range arm {
		s, err := ReturnSites(elf.EM_AARCH64, tc.code)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(s.Sites, tc.sites) || !slices.Equal(s.Gaps, tc.gaps) {
			t.Errorf("arm64 %s: sites %+v gaps %+v, want %+v %+v", tc.name, s.Sites, s.Gaps, tc.sites, tc.gaps)
		}
	}

	if _, err := ReturnSites(elf.EM_RISCV, []byte{0x67, 0x80, 0x00, 0x00}); err == nil {
		t.Error("riscv accepted")
	}
}

// fuzzMachines are the machines FuzzReturnSites drives, chosen by the
// first input byte.
var fuzzMachines = []elf.Machine{elf.EM_X86_64, elf.EM_AARCH64, elf.EM_386}

func FuzzReturnSites(f *testing.F) {
	for i, path := range []string{goprog, goprogARM64, mallocUser} {
		b := mustOpen(f, path)
		for _, name := range []string{"main.classify", "main.recurse", "classify", "alloc_round", "main"} {
			fn, err := b.Function(name)
			if err != nil || fn.Size == 0 {
				continue
			}
			code, err := b.readCode(fn.Offset, min(fn.Size, 4096))
			if err != nil {
				f.Fatal(err)
			}
			f.Add(byte(i%2), code)
		}
	}
	f.Add(byte(0), []byte{0xf3, 0x0f, 0x1e, 0xfa, 0x06, 0xc3})
	f.Fuzz(func(t *testing.T, sel byte, code []byte) {
		machine := fuzzMachines[int(sel)%len(fuzzMachines)]
		s, err := ReturnSites(machine, code)
		if err != nil {
			t.Fatal(err)
		}
		var covered uint64
		for _, g := range s.Gaps {
			covered += g.Len
		}
		for _, site := range s.Sites {
			if site.Offset >= uint64(len(code)) {
				t.Fatalf("site %+v beyond %d bytes", site, len(code))
			}
			if machine == elf.EM_AARCH64 && (site.Offset%4 != 0 || site.Uncertain) {
				t.Fatalf("arm64 site %+v", site)
			}
			if !site.Uncertain && !instructionBoundary(machine, code, site.Offset) {
				t.Fatalf("certain site %+v is not a boundary", site)
			}
		}
		if covered > uint64(len(code)) {
			t.Fatalf("gaps cover %d of %d bytes", covered, len(code))
		}
	})
}

func BenchmarkReturnSites(b *testing.B) {
	bin := mustOpen(b, goprog)
	fn, err := bin.Function("main.main")
	if err != nil {
		b.Fatal(err)
	}
	code, err := bin.readCode(fn.Offset, fn.Size)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(code)))
	for b.Loop() {
		if _, err := ReturnSites(elf.EM_X86_64, code); err != nil {
			b.Fatal(err)
		}
	}
}
