package usdt

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/probekit/probekit/argspec"
	"github.com/probekit/probekit/internal/features"
	"github.com/probekit/probekit/internal/safeelf"
	"github.com/probekit/probekit/internal/test/bpftest"
	"github.com/probekit/probekit/internal/test/testkit"
)

// --- layouts ---------------------------------------------------------------

func specsValue(t testing.TB, load func() (*ebpf.CollectionSpec, error)) btf.Type {
	t.Helper()
	spec, err := load()
	if err != nil {
		t.Fatal(err)
	}
	ms, ok := spec.Maps[specsMapName]
	if !ok {
		t.Fatalf("no %s map", specsMapName)
	}
	return ms.Value
}

// layoutFromObject reads the spec layout from a committed BPF object file
// of another architecture (not embedded in this build).
func layoutFromObject(t *testing.T, name string) *specLayout {
	t.Helper()
	spec, err := ebpf.LoadCollectionSpec(filepath.Join(testkit.Root(), "internal", "test", "bpftest", name))
	if err != nil {
		t.Fatal(err)
	}
	l, err := newSpecLayout(spec.Maps[specsMapName].Value)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// The field positions of struct __bpf_usdt_spec (libbpf's usdt.bpf.h, 1.7
// and before), in bits from the start of the struct holding them, as clang
// laid them out for each object.
func TestSpecLayouts(t *testing.T) {
	f := func(byteOff, bits uint32) specField { return specField{byteOff * 8, bits} }
	v17 := specLayout{
		valueSize: 304, argsOff: 0, argStride: 24, argCap: 12,
		cookie: f(288, 64), argCnt: f(296, 16),
		valOff: f(0, 64), argType: specField{64, 8},
		idxRegOff: specField{80, 12}, scaleShift: specField{92, 4},
		regOff: f(14, 16), signed: f(16, 8), bitShift: f(17, 8),
	}
	// Big-endian: the same bit offsets counted from the most significant
	// bit: arg_type in byte 12, idx_reg_off the high 12 bits of the u16 at
	// byte 10, scale_bitshift its low 4 bits.
	v17be := v17
	v17be.argType = specField{96, 8}
	v17be.idxRegOff = specField{80, 12}
	v17be.scaleShift = specField{92, 4}
	pre17 := specLayout{
		valueSize: 208, argsOff: 0, argStride: 16, argCap: 12,
		cookie: f(192, 64), argCnt: f(200, 16),
		valOff: f(0, 64), argType: f(8, 32),
		regOff: f(12, 16), signed: f(14, 8), bitShift: f(15, 8),
	}
	for _, tc := range []struct {
		name string
		got  func(t *testing.T) *specLayout
		want specLayout
		sib  bool
	}{
		{"1.7 x86", func(t *testing.T) *specLayout {
			l, err := newSpecLayout(specsValue(t, bpftest.LoadArgs))
			if err != nil {
				t.Fatal(err)
			}
			return l
		}, v17, true},
		{"pre-1.7 x86", func(t *testing.T) *specLayout {
			l, err := newSpecLayout(specsValue(t, bpftest.LoadArgsPre17))
			if err != nil {
				t.Fatal(err)
			}
			return l
		}, pre17, false},
		{"1.7 s390x", func(t *testing.T) *specLayout { return layoutFromObject(t, "layout_s390_bpfeb.o") }, v17be, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := tc.got(t)
			if *l != tc.want {
				t.Errorf("layout\n got %+v\nwant %+v", *l, tc.want)
			}
			if l.size() != tc.want.valueSize || l.hasSIB() != tc.sib {
				t.Errorf("size %d hasSIB %v, want %d %v", l.size(), l.hasSIB(), tc.want.valueSize, tc.sib)
			}
		})
	}
}

func TestSpecLayoutRefused(t *testing.T) {
	u16 := &btf.Int{Name: "u16", Size: 2}
	u64 := &btf.Int{Name: "u64", Size: 8}
	arg := &btf.Struct{Name: "__bpf_usdt_arg_spec", Size: 16, Members: []btf.Member{
		{Name: "val_off", Type: u64, Offset: 0},
		{Name: "reg_off", Type: u16, Offset: 96},
	}}
	spec := func(elem btf.Type, n uint32, size uint32) btf.Type {
		return &btf.Struct{Name: "__bpf_usdt_spec", Size: size, Members: []btf.Member{
			{Name: "args", Type: &btf.Array{Index: u64, Type: elem, Nelems: n}, Offset: 0},
			{Name: "usdt_cookie", Type: u64, Offset: btf.Bits(8 * 16 * n)},
			{Name: "arg_cnt", Type: u16, Offset: btf.Bits(8 * (16*n + 8))},
		}}
	}
	for name, v := range map[string]btf.Type{
		"not a struct":      u64,
		"no args":           &btf.Struct{Name: "x", Size: 8},
		"missing arg_type":  spec(arg, 12, 208),
		"args overflow":     spec(arg, 12, 100),
		"too many args":     spec(arg, 13, 224),
		"args of integers":  spec(u64, 12, 208),
		"arg member is ptr": spec(&btf.Struct{Size: 16, Members: []btf.Member{{Name: "val_off", Type: &btf.Pointer{Target: u64}}}}, 12, 208),
	} {
		if _, err := newSpecLayout(v); !errors.Is(err, errSpecLayout) {
			t.Errorf("%s: err %v, want errSpecLayout", name, err)
		}
	}
}

// testSpec uses every field with distinct values.
func testSpec() bpfSpec {
	return bpfSpec{Cookie: 0x1122334455667788, Args: []bpfArg{
		{Type: argSIB, ValOff: uint64(-8 & (1<<64 - 1)), RegOff: 112, IdxRegOff: 0xabc, ScaleShift: 3, Signed: true, BitShift: 32},
		{Type: argConst, ValOff: 0x8000000000000001, BitShift: 0},
		{Type: argRegDeref, ValOff: 24, RegOff: 152, Signed: false, BitShift: 56},
	}}
}

func i64(v int64) uint64 { return uint64(v) }

// Expected bytes written from the field positions above with plain integer
// stores, independently of the BTF-driven encoder.
func TestSpecEncode(t *testing.T) {
	t.Run("1.7 little-endian", func(t *testing.T) {
		l, err := newSpecLayout(specsValue(t, bpftest.LoadArgs))
		if err != nil {
			t.Fatal(err)
		}
		want := make([]byte, 304)
		le := binary.LittleEndian
		le.PutUint64(want[288:], 0x1122334455667788)
		le.PutUint16(want[296:], 3)
		a := want[0:]
		le.PutUint64(a, i64(-8))
		a[8] = argSIB
		le.PutUint16(a[10:], 0xabc|3<<12)
		le.PutUint16(a[14:], 112)
		a[16], a[17] = 1, 32
		a = want[24:]
		le.PutUint64(a, 0x8000000000000001)
		a[8] = argConst
		a = want[48:]
		le.PutUint64(a, 24)
		a[8] = argRegDeref
		le.PutUint16(a[14:], 152)
		a[17] = 56
		s := testSpec()
		got, err := l.encodeOrder(&s, false)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("encoded\n got %x\nwant %x", got, want)
		}
		if hostBigEndian {
			return
		}
		s = testSpec()
		native, err := l.encode(&s)
		if err != nil || !bytes.Equal(native, want) {
			t.Errorf("encode (host order) differs: %v", err)
		}
	})
	t.Run("1.7 big-endian", func(t *testing.T) {
		l := layoutFromObject(t, "layout_s390_bpfeb.o")
		want := make([]byte, 304)
		be := binary.BigEndian
		be.PutUint64(want[288:], 0x1122334455667788)
		be.PutUint16(want[296:], 3)
		a := want[0:]
		be.PutUint64(a, i64(-8))
		a[12] = argSIB
		be.PutUint16(a[10:], 0xabc<<4|3)
		be.PutUint16(a[14:], 112)
		a[16], a[17] = 1, 32
		a = want[24:]
		be.PutUint64(a, 0x8000000000000001)
		a[12] = argConst
		a = want[48:]
		be.PutUint64(a, 24)
		a[12] = argRegDeref
		be.PutUint16(a[14:], 152)
		a[17] = 56
		s := testSpec()
		got, err := l.encodeOrder(&s, true)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("encoded\n got %x\nwant %x", got, want)
		}
	})
	t.Run("pre-1.7", func(t *testing.T) {
		l, err := newSpecLayout(specsValue(t, bpftest.LoadArgsPre17))
		if err != nil {
			t.Fatal(err)
		}
		s := testSpec()
		if errs := l.fit(&s); len(errs) != 1 || !strings.Contains(errs[0].Error(), "argument 1 unavailable") {
			t.Fatalf("fit: %v, want one error for argument 1", errs)
		}
		if s.Args[0] != (bpfArg{Type: argUnavailable, BitShift: 32}) {
			t.Errorf("SIB argument became %+v, want unavailable with its size", s.Args[0])
		}
		want := make([]byte, 208)
		le := binary.LittleEndian
		le.PutUint64(want[192:], 0x1122334455667788)
		le.PutUint16(want[200:], 3)
		le.PutUint32(want[8:], uint32(argUnavailable))
		want[15] = 32
		le.PutUint64(want[16:], 0x8000000000000001)
		le.PutUint64(want[32:], 24)
		le.PutUint32(want[40:], uint32(argRegDeref))
		le.PutUint16(want[44:], 152)
		want[47] = 56
		got, err := l.encodeOrder(&s, false)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("encoded\n got %x\nwant %x", got, want)
		}
		// encode makes the same downgrade without fit.
		s = testSpec()
		again, err := l.encodeOrder(&s, false)
		if err != nil || !bytes.Equal(again, want) {
			t.Errorf("encode without fit differs: %v", err)
		}
	})
}

func TestSpecFitLimits(t *testing.T) {
	l, err := newSpecLayout(specsValue(t, bpftest.LoadArgs))
	if err != nil {
		t.Fatal(err)
	}
	s := bpfSpec{Args: make([]bpfArg, 14)}
	s.Args[0] = bpfArg{Type: argSIB, IdxRegOff: 4096, BitShift: 0}
	s.Args[1] = bpfArg{Type: argSIB, IdxRegOff: 4095, ScaleShift: 15}
	s.Args[2] = bpfArg{Type: argSIB, IdxRegOff: 4095, ScaleShift: 16}
	errs := l.fit(&s)
	if len(s.Args) != 12 {
		t.Errorf("%d args kept, want 12", len(s.Args))
	}
	if s.Args[0].Type != argUnavailable || s.Args[1].Type != argSIB || s.Args[2].Type != argUnavailable {
		t.Errorf("types %d %d %d, want unavailable, SIB, unavailable", s.Args[0].Type, s.Args[1].Type, s.Args[2].Type)
	}
	if len(errs) != 4 {
		t.Errorf("errors %v, want 4 (two dropped, two unavailable)", errs)
	}
}

// --- buildSpec -------------------------------------------------------------

func mustParseArgs(t *testing.T, m elf.Machine, s string) []argspec.Arg {
	t.Helper()
	args, err := argspec.Parse(m, s)
	if err != nil {
		t.Fatal(err)
	}
	return args
}

func TestBuildSpec(t *testing.T) {
	syms := map[string]uint64{"counter": 0x4010, "wide": 0x4018}
	sym := func(n string) (uint64, bool) { v, ok := syms[n]; return v, ok }
	const loc = 0x1481
	for _, tc := range []struct {
		name          string
		host, machine elf.Machine
		args          string
		want          []bpfArg
		unavailable   []int // argument indexes with an error
	}{
		{"sample sizes", elf.EM_X86_64, elf.EM_X86_64, "-1@%dil 1@%r8b -2@%cx 2@%r10w -4@%edx 4@%ebp -8@%r11 8@%rax", []bpfArg{
			{Type: argReg, RegOff: 112, Signed: true, BitShift: 56},
			{Type: argReg, RegOff: 72, BitShift: 56},
			{Type: argReg, RegOff: 88, Signed: true, BitShift: 48},
			{Type: argReg, RegOff: 56, BitShift: 48},
			{Type: argReg, RegOff: 96, Signed: true, BitShift: 32},
			{Type: argReg, RegOff: 32, BitShift: 32},
			{Type: argReg, RegOff: 48, Signed: true, BitShift: 0},
			{Type: argReg, RegOff: 80, BitShift: 0},
		}, nil},
		{"consts", elf.EM_X86_64, elf.EM_X86_64, "-4@$5 -4@$-9 8@$18446744073709551614", []bpfArg{
			{Type: argConst, ValOff: 5, Signed: true, BitShift: 32},
			{Type: argConst, ValOff: i64(-9), Signed: true, BitShift: 32},
			{Type: argConst, ValOff: 18446744073709551614, BitShift: 0},
		}, nil},
		{"mem and sib", elf.EM_X86_64, elf.EM_X86_64, "-4@-1204(%rbp) 8@(%rsp) -4@(%rdi,%rsi,4) 1@-96(%rbp,%rax,8)", []bpfArg{
			{Type: argRegDeref, RegOff: 32, ValOff: i64(-1204), Signed: true, BitShift: 32},
			{Type: argRegDeref, RegOff: 152, BitShift: 0},
			{Type: argSIB, RegOff: 112, IdxRegOff: 104, ScaleShift: 2, Signed: true, BitShift: 32},
			{Type: argSIB, RegOff: 32, IdxRegOff: 80, ScaleShift: 3, ValOff: i64(-96), BitShift: 56},
		}, nil},
		{"pc-relative", elf.EM_X86_64, elf.EM_X86_64, "-4@counter(%rip) 8@wide+8(%rip) -4@missing(%rip)", []bpfArg{
			{Type: argRegDeref, RegOff: 128, ValOff: 0x4010 - loc, Signed: true, BitShift: 32},
			{Type: argRegDeref, RegOff: 128, ValOff: 0x4018 + 8 - loc, BitShift: 0},
			{Type: argUnavailable, BitShift: 32},
		}, []int{2}},
		{"xmm", elf.EM_X86_64, elf.EM_X86_64, "8@%xmm0 -4@%edi", []bpfArg{
			{Type: argUnavailable, BitShift: 0},
			{Type: argReg, RegOff: 112, Signed: true, BitShift: 32},
		}, []int{0}},
		{"float raw bits", elf.EM_X86_64, elf.EM_X86_64, "-8f@8(%rsp)", []bpfArg{
			{Type: argRegDeref, RegOff: 152, ValOff: 8, BitShift: 0},
		}, nil},
		{"i386 on x86-64", elf.EM_X86_64, elf.EM_386, "-4@%eax 4@8(%esp) -2@(%ebx,%ecx,2)", []bpfArg{
			{Type: argReg, RegOff: 80, Signed: true, BitShift: 32},
			{Type: argRegDeref, RegOff: 152, ValOff: 8, BitShift: 32},
			{Type: argSIB, RegOff: 40, IdxRegOff: 88, ScaleShift: 1, Signed: true, BitShift: 48},
		}, nil},
		{"arm on arm64", elf.EM_AARCH64, elf.EM_ARM, "-4@r1 4@[sp, #8] 4@#5", []bpfArg{
			{Type: argReg, RegOff: 8, Signed: true, BitShift: 32},
			{Type: argRegDeref, RegOff: 13 * 8, ValOff: 8, BitShift: 32},
			{Type: argConst, ValOff: 5, BitShift: 32},
		}, nil},
		{"arm64 native", elf.EM_AARCH64, elf.EM_AARCH64, "8@x22 8@[sp, 112] -4@[x30,-40]", []bpfArg{
			{Type: argReg, RegOff: 176, BitShift: 0},
			{Type: argRegDeref, RegOff: 248, ValOff: 112, BitShift: 0},
			{Type: argRegDeref, RegOff: 240, ValOff: i64(-40), Signed: true, BitShift: 32},
		}, nil},
		{"foreign binary", elf.EM_X86_64, elf.EM_AARCH64, "8@x22 4@5", []bpfArg{
			{Type: argUnavailable, BitShift: 0},
			{Type: argConst, ValOff: 5, BitShift: 32},
		}, []int{0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, errs := buildSpecFor(tc.host, tc.machine, loc, mustParseArgs(t, tc.machine, tc.args), sym, 77)
			if s.Cookie != 77 {
				t.Errorf("cookie %d", s.Cookie)
			}
			if len(s.Args) != len(tc.want) {
				t.Fatalf("%d args, want %d", len(s.Args), len(tc.want))
			}
			for i := range tc.want {
				if s.Args[i] != tc.want[i] {
					t.Errorf("arg %d: got %+v\nwant %+v", i, s.Args[i], tc.want[i])
				}
			}
			var bad []int
			for _, e := range errs {
				var ae *argUnavailableError
				if !errors.As(e, &ae) {
					t.Fatalf("error %v is not an argUnavailableError", e)
				}
				bad = append(bad, ae.Index)
				t.Log(e)
			}
			if fmt.Sprint(bad) != fmt.Sprint(tc.unavailable) && !(len(bad) == 0 && len(tc.unavailable) == 0) {
				t.Errorf("unavailable %v, want %v", bad, tc.unavailable)
			}
		})
	}
}

func TestBuildSpecTooManyArgs(t *testing.T) {
	args := make([]argspec.Arg, 14)
	for i := range args {
		args[i] = argspec.Arg{Size: 8, Kind: argspec.Const, Value: int64(i)}
	}
	s, errs := buildSpecFor(elf.EM_X86_64, elf.EM_X86_64, 0, args, nil, 0)
	if len(s.Args) != 12 || len(errs) != 2 || s.Args[11].ValOff != 11 {
		t.Errorf("%d args, errors %v; want 12 args and 2 errors", len(s.Args), errs)
	}
}

// openSymbolResolver is symbolResolver over the file at path, read
// through the hardened reader as attaching does.
func openSymbolResolver(t *testing.T, path string) func(string) (uint64, bool) {
	t.Helper()
	fd, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	f, err := safeelf.NewFile(fd)
	if err != nil {
		t.Fatal(err)
	}
	return symbolResolver(f)
}

func TestSymbolResolver(t *testing.T) {
	f, err := elf.Open(testkit.Fixture("usdt_sample"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	resolve := openSymbolResolver(t, testkit.Fixture("usdt_sample"))
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	var want uint64
	for _, s := range syms {
		if s.Name == "sample_global_counter" {
			want = s.Value
		}
	}
	if want == 0 {
		t.Fatal("fixture has no sample_global_counter")
	}
	if got, ok := resolve("sample_global_counter"); !ok || got != want {
		t.Errorf("sample_global_counter = %#x %v, want %#x", got, ok, want)
	}
	for _, name := range []string{"", "no_such_symbol", "printf"} { // printf: undefined (imported)
		if v, ok := resolve(name); ok {
			t.Errorf("%q resolved to %#x", name, v)
		}
	}
}

// --- kernel tests ------------------------------------------------------------

// A location of the fixture, read with a minimal note reader so that these
// tests depend on nothing but spec.go (note.go has its own tests).
type testLocation struct {
	probe   string
	addr    uint64 // link-time vaddr
	fileOff uint64
	args    []argspec.Arg
}

func readTestLocations(t *testing.T, path string) []testLocation {
	t.Helper()
	notes, f := testkit.Notes(t, path)
	var locs []testLocation
	for _, n := range notes {
		loc := testLocation{probe: n.Name, addr: n.Location}
		for _, p := range f.Progs {
			if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && loc.addr >= p.Vaddr && loc.addr < p.Vaddr+p.Memsz {
				loc.fileOff = loc.addr - p.Vaddr + p.Off
			}
		}
		if loc.fileOff == 0 {
			t.Fatalf("%s at %#x: no executable segment", loc.probe, loc.addr)
		}
		loc.args = mustParseArgs(t, f.Machine, n.Args)
		locs = append(locs, loc)
	}
	return locs
}

// runtimeAddr translates a file offset of path into its address in pid
// from /proc/PID/maps: start − offset + file offset of its mapping.
func runtimeAddr(t *testing.T, pid int, path string, fileOff uint64) uint64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	mf, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer mf.Close()
	sc := bufio.NewScanner(mf)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || !strings.Contains(fields[1], "x") {
			continue
		}
		if ino, _ := strconv.ParseUint(fields[4], 10, 64); ino != inodeOf(st) {
			continue
		}
		var start, end, off uint64
		fmt.Sscanf(fields[0], "%x-%x", &start, &end)
		fmt.Sscanf(fields[2], "%x", &off)
		if fileOff >= off && fileOff < off+(end-start) {
			return start - off + fileOff
		}
	}
	t.Fatalf("offset %#x of %s not mapped executable in pid %d", fileOff, path, pid)
	return 0
}

func inodeOf(st os.FileInfo) uint64 {
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		return sys.Ino
	}
	return 0
}

// hitRecord is struct hit of args.c.
type hitRecord = bpftest.ArgsHit

const (
	eNOENT = -2
	eSRCH  = -3
	eINVAL = -22
)

type attachMode struct {
	name   string
	cookie bool // spec id from the BPF cookie, else from the IP map
	multi  bool // one uprobe_multi link
}

var attachModes = []attachMode{
	{"cookie", true, false},
	{"cookie-multi", true, true},
	{"ipmap", false, false},
}

// The probes whose values the fixture reports, fired 3 rounds each.
var kernelProbes = []string{"zero", "sizes", "consts", "twelve", "mem", "sib", "global", "inlined"}

// TestKernelArgs attaches the args reader at every location of the
// fixture's probes, fills __bpf_usdt_specs with buildSpec and encode, and
// checks every value bpf_usdt_arg and friends return against what the
// fixture passed, for both spec layouts and both ways of finding a spec.
// It also checks that PT_REGS_IP is the probe's runtime address, which the
// IP map and PC-relative arguments rely on.
func TestKernelArgs(t *testing.T) {
	testkit.RequireKernel(t)
	path := testkit.Fixture("usdt_sample")
	locs := readTestLocations(t, path)
	sym := openSymbolResolver(t, path)

	for _, obj := range []struct {
		name  string
		load  func() (*ebpf.CollectionSpec, error)
		pre17 bool
	}{{"1.7", bpftest.LoadArgs, false}, {"pre-1.7", bpftest.LoadArgsPre17, true}} {
		for _, mode := range attachModes {
			if obj.pre17 && mode.multi {
				continue // the layout does not change with the attach path
			}
			t.Run(obj.name+"/"+mode.name, func(t *testing.T) {
				runArgsReader(t, path, locs, sym, obj.load, obj.pre17, mode)
			})
		}
	}
}

func runArgsReader(t *testing.T, path string, locs []testLocation, sym func(string) (uint64, bool),
	load func() (*ebpf.CollectionSpec, error), pre17 bool, mode attachMode) {
	// The IP map case is what kernels without the others use.
	if mode.cookie {
		ok, err := features.Have(features.Cookie)
		testkit.NeedFeature(t, ok, err, features.Cookie.Since(), features.Cookie.String())
	}
	if mode.multi {
		ok, err := features.Have(features.UprobeMulti)
		testkit.NeedFeature(t, ok, err, features.UprobeMulti.Since(), features.UprobeMulti.String())
	}
	p := testkit.Start(t, path)

	spec, err := load()
	if err != nil {
		t.Fatal(err)
	}
	if err := spec.Variables[cookieFlagName].Set(mode.cookie); err != nil {
		t.Fatal(err)
	}
	if mode.multi {
		spec.Programs["args_reader"].AttachType = ebpf.AttachTraceUprobeMulti
	}
	layout, err := newSpecLayout(spec.Maps[specsMapName].Value)
	if err != nil {
		t.Fatal(err)
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		t.Fatal(err)
	}
	defer coll.Close()
	prog := coll.Programs["args_reader"]

	// One spec per location; spec id = index; usdt cookie = a value
	// derived from it so that a wrong spec is visible.
	var (
		offsets, ids []uint64
		byCookie     = map[uint64]testLocation{}
		unavailable  = map[uint64]map[int]bool{}
	)
	for i, loc := range locs {
		if !slices.Contains(kernelProbes, loc.probe) {
			continue
		}
		id := uint32(len(offsets))
		cookie := 0xc0ffee0000 + uint64(i)
		s, errs := buildSpec(elf.EM_X86_64, loc.addr, loc.args, sym, cookie)
		if len(errs) != 0 {
			t.Fatalf("%s: %v", loc.probe, errs)
		}
		unavailable[cookie] = map[int]bool{}
		for _, e := range layout.fit(&s) {
			var ae *argUnavailableError
			if !errors.As(e, &ae) {
				t.Fatal(e)
			}
			unavailable[cookie][ae.Index] = true
		}
		b, err := layout.encode(&s)
		if err != nil {
			t.Fatal(err)
		}
		if err := coll.Maps[specsMapName].Update(id, b, ebpf.UpdateAny); err != nil {
			t.Fatal(err)
		}
		if !mode.cookie {
			ip := runtimeAddr(t, p.PID(), path, loc.fileOff)
			k := ipKey{PID: uint32(p.PID()), IP: ip}
			if err := coll.Maps[ipMapName].Update(k, id, ebpf.UpdateNoExist); err != nil {
				t.Fatal(err)
			}
		}
		offsets = append(offsets, loc.fileOff)
		ids = append(ids, uint64(id))
		byCookie[cookie] = loc
	}
	if pre17 {
		n := 0
		for _, u := range unavailable {
			n += len(u)
		}
		if n != 1 {
			t.Fatalf("pre-1.7 layout: %d unavailable arguments, want 1 (sib's SIB operand)", n)
		}
	}

	ex, err := link.OpenExecutable(path)
	if err != nil {
		t.Fatal(err)
	}
	if mode.multi {
		l, err := ex.UprobeMulti(nil, prog, &link.UprobeMultiOptions{Addresses: offsets, Cookies: ids, PID: uint32(p.PID())})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
	} else {
		for i, off := range offsets {
			opts := &link.UprobeOptions{Address: off, PID: p.PID()}
			if mode.cookie {
				opts.Cookie = ids[i]
			}
			l, err := ex.Uprobe("", prog, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
		}
	}

	rd, err := ringbuf.NewReader(coll.Maps["hits"])
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()

	for _, probe := range kernelProbes {
		want := p.Fire(probe, 3)
		for i, w := range want {
			h := readHit(t, rd, p.PID())
			loc, ok := byCookie[h.Cookie]
			if !ok {
				t.Fatalf("%s hit %d: cookie %#x names no location", probe, i, h.Cookie)
			}
			if loc.probe != probe {
				t.Fatalf("%s hit %d: fired location of %s", probe, i, loc.probe)
			}
			checkHit(t, fmt.Sprintf("%s hit %d", probe, i), h, w.Args, loc, unavailable[h.Cookie])
			if ip := runtimeAddr(t, p.PID(), path, loc.fileOff); h.Ip != ip {
				t.Errorf("%s hit %d: PT_REGS_IP %#x, want the probe's runtime address %#x", probe, i, h.Ip, ip)
			}
		}
	}
}

// readHit returns the next record of pid (others running the fixture hit
// the same uprobes only with a PID filter broken, which is checked too).
func readHit(t *testing.T, rd *ringbuf.Reader, pid int) hitRecord {
	t.Helper()
	rd.SetDeadline(time.Now().Add(5 * time.Second))
	rec, err := rd.Read()
	if err != nil {
		t.Fatalf("no hit: %v", err)
	}
	var h hitRecord
	if err := binary.Read(bytes.NewReader(rec.RawSample), binary.NativeEndian, &h); err != nil {
		t.Fatal(err)
	}
	if int(h.Pid) != pid {
		t.Fatalf("hit from pid %d, want %d", h.Pid, pid)
	}
	return h
}

func checkHit(t *testing.T, what string, h hitRecord, want []int64, loc testLocation, unavailable map[int]bool) {
	t.Helper()
	if int(h.ArgCnt) != len(loc.args) || len(want) != len(loc.args) {
		t.Errorf("%s: arg_cnt %d, note has %d, fixture passed %d", what, h.ArgCnt, len(loc.args), len(want))
		return
	}
	for n := 0; n <= maxSpecArgs; n++ {
		if n >= len(want) {
			// Past the last argument, and at n = 12 past the maximum.
			if h.ArgRet[n] != eNOENT || h.ArgVal[n] != 0 || h.SizeRet[n] != eNOENT {
				t.Errorf("%s: arg %d: ret %d val %d size %d, want -ENOENT, 0, -ENOENT", what, n, h.ArgRet[n], h.ArgVal[n], h.SizeRet[n])
			}
			continue
		}
		if h.SizeRet[n] != int32(loc.args[n].Size) {
			t.Errorf("%s: arg %d: size %d, want %d", what, n, h.SizeRet[n], loc.args[n].Size)
		}
		if unavailable[n] {
			if h.ArgRet[n] != eINVAL || h.ArgVal[n] != 0 {
				t.Errorf("%s: unavailable arg %d: ret %d val %d, want -EINVAL, 0", what, n, h.ArgRet[n], h.ArgVal[n])
			}
			continue
		}
		if h.ArgRet[n] != 0 || h.ArgVal[n] != want[n] {
			t.Errorf("%s: arg %d (%s): ret %d val %d, want 0, %d", what, n, loc.args[n].Operand, h.ArgRet[n], h.ArgVal[n], want[n])
		}
	}
}

// TestKernelNoSpec: a probe whose spec id names no spec (a BPF cookie past
// the map, an IP not in the map) gives -ESRCH everywhere and cookie 0.
func TestKernelNoSpec(t *testing.T) {
	testkit.RequireKernel(t)

	path := testkit.Fixture("usdt_sample")
	var zero testLocation
	for _, l := range readTestLocations(t, path) {
		if l.probe == "zero" {
			zero = l
		}
	}
	for _, cookie := range []bool{true, false} {
		t.Run(fmt.Sprintf("cookie=%v", cookie), func(t *testing.T) {
			if cookie {
				needCookie(t)
			}
			p := testkit.Start(t, path)
			spec, err := bpftest.LoadArgs()
			if err != nil {
				t.Fatal(err)
			}
			if err := spec.Variables[cookieFlagName].Set(cookie); err != nil {
				t.Fatal(err)
			}
			coll, err := ebpf.NewCollection(spec)
			if err != nil {
				t.Fatal(err)
			}
			defer coll.Close()
			ex, err := link.OpenExecutable(path)
			if err != nil {
				t.Fatal(err)
			}
			// A cookie that is no spec id; none where the spec id
			// comes from the IP map (and a kernel may lack cookies).
			var c uint64
			if cookie {
				c = uint64(spec.Maps[specsMapName].MaxEntries) + 7
			}
			l, err := ex.Uprobe("", coll.Programs["args_reader"], &link.UprobeOptions{
				Address: zero.fileOff, PID: p.PID(), Cookie: c})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			rd, err := ringbuf.NewReader(coll.Maps["hits"])
			if err != nil {
				t.Fatal(err)
			}
			defer rd.Close()
			p.Fire("zero", 1)
			h := readHit(t, rd, p.PID())
			if h.ArgCnt != eSRCH || h.Cookie != 0 {
				t.Errorf("arg_cnt %d cookie %d, want -ESRCH, 0", h.ArgCnt, h.Cookie)
			}
			for n := range h.ArgRet {
				if h.ArgRet[n] != eSRCH || h.ArgVal[n] != 0 || h.SizeRet[n] != eSRCH {
					t.Errorf("arg %d: ret %d val %d size %d, want -ESRCH, 0, -ESRCH", n, h.ArgRet[n], h.ArgVal[n], h.SizeRet[n])
				}
			}
		})
	}
}

// TestKernelExactSizeRead: a memory argument ending at the last byte of
// a mapping is read (libbpf reads 8 bytes whatever the size and faults
// there), and a read that does cross the end faults. The operands are
// made relative to the probe's IP, like PC-relative ones, and point at the
// top of the fixture's stack, whose last page is resident (argv and envp)
// and has nothing mapped above it.
func TestKernelExactSizeRead(t *testing.T) {
	testkit.RequireKernel(t)
	needCookie(t)
	path := testkit.Fixture("usdt_sample")
	var zero testLocation
	for _, l := range readTestLocations(t, path) {
		if l.probe == "zero" {
			zero = l
		}
	}
	p := testkit.Start(t, path)
	top := stackTop(t, p.PID())
	ip := runtimeAddr(t, p.PID(), path, zero.fileOff)
	mem := make([]byte, 8)
	mf, err := os.Open(fmt.Sprintf("/proc/%d/mem", p.PID()))
	if err != nil {
		t.Fatal(err)
	}
	_, err = mf.ReadAt(mem, int64(top-8))
	mf.Close()
	if err != nil {
		t.Fatal(err)
	}
	ne := binary.NativeEndian
	at := func(end uint64, size int) bpfArg { // the size bytes ending end bytes below the top
		return bpfArg{Type: argRegDeref, RegOff: 128, ValOff: top - end - ip, BitShift: uint8(64 - 8*size)}
	}
	s := bpfSpec{Args: []bpfArg{at(1, 1), at(2, 2), at(4, 4), at(8, 8), at(4, 8), at(1, 2)}}
	want := []struct {
		ret int32
		val int64
	}{
		{0, int64(mem[7])},
		{0, int64(ne.Uint16(mem[6:]))},
		{0, int64(ne.Uint32(mem[4:]))},
		{0, int64(ne.Uint64(mem))},
		{-14, 0}, // -EFAULT: 4 bytes past the top
		{-14, 0},
	}

	spec, err := bpftest.LoadArgs()
	if err != nil {
		t.Fatal(err)
	}
	layout, err := newSpecLayout(spec.Maps[specsMapName].Value)
	if err != nil {
		t.Fatal(err)
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		t.Fatal(err)
	}
	defer coll.Close()
	b, err := layout.encode(&s)
	if err != nil {
		t.Fatal(err)
	}
	if err := coll.Maps[specsMapName].Update(uint32(0), b, ebpf.UpdateAny); err != nil {
		t.Fatal(err)
	}
	ex, err := link.OpenExecutable(path)
	if err != nil {
		t.Fatal(err)
	}
	l, err := ex.Uprobe("", coll.Programs["args_reader"], &link.UprobeOptions{Address: zero.fileOff, PID: p.PID()})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	rd, err := ringbuf.NewReader(coll.Maps["hits"])
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	p.Fire("zero", 1)
	h := readHit(t, rd, p.PID())
	for n, w := range want {
		if h.ArgRet[n] != w.ret || h.ArgVal[n] != w.val {
			t.Errorf("arg %d: ret %d val %#x, want %d %#x", n, h.ArgRet[n], h.ArgVal[n], w.ret, w.val)
		}
	}
}

// stackTop returns the end of pid's [stack] mapping, skipping the test
// when another mapping starts right there.
func stackTop(t *testing.T, pid int) uint64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	var top uint64
	starts := map[uint64]bool{}
	for _, line := range strings.Split(string(data), "\n") {
		var start, end uint64
		if _, err := fmt.Sscanf(line, "%x-%x", &start, &end); err != nil {
			continue
		}
		starts[start] = true
		if strings.HasSuffix(line, "[stack]") {
			top = end
		}
	}
	if top == 0 {
		t.Fatal("no [stack] mapping")
	}
	if starts[top] {
		t.Skip("a mapping follows the stack; no unmapped page to fault on")
	}
	return top
}

// FuzzBuildSpec: any argument string of any machine, on any host, builds a
// spec that both layouts encode to their size without panicking, with
// every argument either expressed or reported.
func FuzzBuildSpec(f *testing.F) {
	for _, s := range []string{
		"-1@%dil 1@%r8b -2@%cx 2@%r10w -4@%edx 4@%ebp -8@%r11 8@%rax",
		"-4@(%rdi,%rsi,4) -8@%rsi",
		"-4@sample_global_counter(%rip) 8@sample_global_wide(%rip)",
		"8@%xmm0 -4@$-9 -4@40+CheckpointStats(%rip)",
		"8@x22 8@[sp, 112] -4@[x30,-40]",
		"-4@[fp, #96] -4@[sp] 4@#5 -8@r4",
	} {
		f.Add(uint8(0), uint8(0), s)
	}
	machines := []elf.Machine{elf.EM_X86_64, elf.EM_386, elf.EM_AARCH64, elf.EM_ARM, elf.EM_S390, elf.EM_RISCV, elf.EM_PPC64, elf.EM_LOONGARCH}
	v17, err := newSpecLayout(specsValue(f, bpftest.LoadArgs))
	if err != nil {
		f.Fatal(err)
	}
	pre17, err := newSpecLayout(specsValue(f, bpftest.LoadArgsPre17))
	if err != nil {
		f.Fatal(err)
	}
	sym := func(name string) (uint64, bool) { return uint64(len(name)) * 0x1000, len(name)%2 == 0 }
	f.Fuzz(func(t *testing.T, host, machine uint8, s string) {
		h, m := machines[int(host)%len(machines)], machines[int(machine)%len(machines)]
		args, err := argspec.Parse(m, s)
		if err != nil {
			return
		}
		spec, errs := buildSpecFor(h, m, 0x1234, args, sym, 1)
		if want := min(len(args), maxSpecArgs); len(spec.Args) != want {
			t.Fatalf("%d args from %d", len(spec.Args), len(args))
		}
		reported := len(errs)
		for _, a := range spec.Args {
			if a.Type == argUnavailable {
				reported--
			}
		}
		if reported < 0 {
			t.Fatalf("an unavailable argument without an error: %v", errs)
		}
		for _, l := range []*specLayout{v17, pre17} {
			c := bpfSpec{Args: slices.Clone(spec.Args), Cookie: spec.Cookie}
			b, err := l.encode(&c)
			if err != nil || len(b) != l.size() {
				t.Fatalf("encode: %d bytes, %v", len(b), err)
			}
		}
	})
}

func BenchmarkSpecEncode(b *testing.B) {
	l, err := newSpecLayout(specsValue(b, bpftest.LoadArgs))
	if err != nil {
		b.Fatal(err)
	}
	args, err := argspec.Parse(elf.EM_X86_64, "-1@%dil 1@%r8b -2@%cx 2@%r10w -4@%edx 4@%ebp -8@%r11 8@%rax -4@(%rdi,%rsi,4) -8@8(%rsp) -4@$5 8@%r9")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		s, _ := buildSpec(elf.EM_X86_64, 0x1000, args, nil, 1)
		if _, err := l.encode(&s); err != nil {
			b.Fatal(err)
		}
	}
}

// TestKernelBPFUSDTMacro: BPF_USDT hands the body the arguments in order,
// 0 for those past the count, with ctx still usable.
func TestKernelBPFUSDTMacro(t *testing.T) {
	testkit.RequireKernel(t)
	needCookie(t)
	path := testkit.Fixture("usdt_sample")
	sym := openSymbolResolver(t, path)
	p := testkit.Start(t, path)
	spec, err := bpftest.LoadArgs()
	if err != nil {
		t.Fatal(err)
	}
	layout, err := newSpecLayout(spec.Maps[specsMapName].Value)
	if err != nil {
		t.Fatal(err)
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		t.Fatal(err)
	}
	defer coll.Close()
	ex, err := link.OpenExecutable(path)
	if err != nil {
		t.Fatal(err)
	}
	probes := []string{"twelve", "sizes", "global"}
	byCookie := map[uint64]testLocation{}
	for _, loc := range readTestLocations(t, path) {
		if !slices.Contains(probes, loc.probe) {
			continue
		}
		id := uint32(len(byCookie))
		s, errs := buildSpec(elf.EM_X86_64, loc.addr, loc.args, sym, 500+uint64(id))
		b, err := layout.encode(&s)
		if err != nil || len(errs) != 0 {
			t.Fatal(err, errs)
		}
		if err := coll.Maps[specsMapName].Update(id, b, ebpf.UpdateAny); err != nil {
			t.Fatal(err)
		}
		l, err := ex.Uprobe("", coll.Programs["args_macro"], &link.UprobeOptions{Address: loc.fileOff, PID: p.PID(), Cookie: uint64(id)})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		byCookie[s.Cookie] = loc
	}
	rd, err := ringbuf.NewReader(coll.Maps["hits"])
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	for _, probe := range probes {
		for _, w := range p.Fire(probe, 2) {
			h := readHit(t, rd, p.PID())
			if loc := byCookie[h.Cookie]; loc.probe != probe || int(h.ArgCnt) != len(w.Args) {
				t.Fatalf("%s: hit of %q (cookie %d) with %d args", probe, loc.probe, h.Cookie, h.ArgCnt)
			}
			var want [maxSpecArgs + 1]int64
			copy(want[:], w.Args)
			if h.ArgVal != want {
				t.Errorf("%s: macro arguments %v, want %v", probe, h.ArgVal, want)
			}
		}
	}
}

// needCookie skips t on kernels before Linux 5.15, which have no BPF
// cookies: the test gives the spec id as the cookie (the IP-map path is
// TestKernelArgs's "ipmap" case).
func needCookie(t *testing.T) {
	t.Helper()
	ok, err := features.Have(features.Cookie)
	testkit.NeedFeature(t, ok, err, features.Cookie.Since(), features.Cookie.String())
}
