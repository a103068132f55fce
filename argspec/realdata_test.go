package argspec

import (
	"bufio"
	"debug/elf"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// note is one line of a testdata/*.args file: the argument string of one
// USDT note, as extract.sh wrote it from `readelf -n`.
type note struct {
	probe string // provider:name
	args  string
}

func readNotes(tb testing.TB, name string) []note {
	tb.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	var notes []note
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		probe, args, ok := strings.Cut(line, "\t")
		if !ok {
			tb.Fatalf("%s: line %q has no tab", name, line)
		}
		notes = append(notes, note{probe, args})
	}
	if err := sc.Err(); err != nil {
		tb.Fatal(err)
	}
	return notes
}

// realFiles lists the committed argument strings with the counts they must
// decode to: notes, arguments (counted independently with grep for
// "SIZE@" at the start of a word) and Unsupported arguments.
var realFiles = []struct {
	file        string
	machine     elf.Machine
	notes, args int
	unsupported int
}{
	{"python3.11.args", elf.EM_X86_64, 8, 16, 0},
	{"postgres15.args", elf.EM_X86_64, 71, 167, 0},
	{"libjvm17.args", elf.EM_X86_64, 531, 1100, 0},
	{"libruby3.1.args", elf.EM_X86_64, 40, 118, 0},
	{"usdt_sample.args", elf.EM_X86_64, 12, 45, 0},
	{"usdt_sample_O0.args", elf.EM_X86_64, 12, 45, 0},
	// sample:sizes "-8@%esi 8@%ecx": 64-bit values in register pairs.
	{"usdt_sample_i386.args", elf.EM_386, 12, 45, 2},
	// sample:global "-4@[x2, #:lo12:.LANCHOR0]".
	{"usdt_sample_aarch64.args", elf.EM_AARCH64, 12, 45, 1},
	{"usdt_sample_armhf.args", elf.EM_ARM, 12, 45, 0},
	{"usdt_sample_s390x.args", elf.EM_S390, 12, 45, 0},
	{"usdt_sample_riscv64.args", elf.EM_RISCV, 12, 45, 0},
	{"usdt_sample_ppc64le.args", elf.EM_PPC64, 12, 45, 0},
	{"usdt_sample_ppc64.args", elf.EM_PPC64, 12, 45, 0},
}

func TestParseRealBinaries(t *testing.T) {
	for _, rf := range realFiles {
		t.Run(rf.file, func(t *testing.T) {
			notes := readNotes(t, rf.file)
			if len(notes) != rf.notes {
				t.Fatalf("%d notes, want %d", len(notes), rf.notes)
			}
			args, unsupported := 0, 0
			for _, n := range notes {
				got, err := Parse(rf.machine, n.args)
				if err != nil {
					t.Errorf("%s %q: %v", n.probe, n.args, err)
					continue
				}
				args += len(got)
				for _, a := range got {
					if a.Kind == Unsupported {
						unsupported++
						t.Logf("%s: %s unsupported: %s", n.probe, a.Operand, a.Reason)
					}
				}
				checkRoundTrip(t, rf.machine, got)
			}
			if args != rf.args || unsupported != rf.unsupported {
				t.Errorf("%d args, %d unsupported; want %d, %d", args, unsupported, rf.args, rf.unsupported)
			}
		})
	}
}

// TestParseRealBinariesExact checks the exact decoding of a representative
// note of each shape, looked up in the committed files so that the input
// is the real one.
func TestParseRealBinariesExact(t *testing.T) {
	rsp, rbp := R("rsp", 152), R("rbp", 32)
	for _, tc := range []struct {
		file, probe string
		nth         int // which note of that probe (0 = first)
		machine     elf.Machine
		want        []Arg
	}{
		{"python3.11.args", "python:gc__start", 0, elf.EM_X86_64, []Arg{
			op(-4, "112(%rsp)", mem(rsp, 112)),
		}},
		{"python3.11.args", "python:function__entry", 0, elf.EM_X86_64, []Arg{
			op(8, "%rbp", reg(R("rbp", 32))),
			op(8, "%r12", reg(R("r12", 24))),
			op(-4, "%eax", reg(R("eax", 80))),
		}},
		{"postgres15.args", "postgresql:checkpoint__done", 0, elf.EM_X86_64, []Arg{
			op(-4, "40+CheckpointStats(%rip)", pcrel("CheckpointStats", 40)),
			op(-4, "NBuffers(%rip)", pcrel("NBuffers", 0)),
			op(-4, "44+CheckpointStats(%rip)", pcrel("CheckpointStats", 44)),
			op(-4, "48+CheckpointStats(%rip)", pcrel("CheckpointStats", 48)),
			op(-4, "52+CheckpointStats(%rip)", pcrel("CheckpointStats", 52)),
		}},
		{"postgres15.args", "postgresql:lock__wait__start", 0, elf.EM_X86_64, []Arg{
			op(4, "(%r12)", mem(R("r12", 24), 0)),
			op(4, "4(%r12)", mem(R("r12", 24), 4)),
			op(4, "8(%r12)", mem(R("r12", 24), 8)),
			op(2, "12(%r12)", mem(R("r12", 24), 12)),
			op(1, "14(%r12)", mem(R("r12", 24), 14)),
			op(-4, "%r13d", reg(R("r13d", 16))),
		}},
		{"libjvm17.args", "hotspot:method__compile__end", 0, elf.EM_X86_64, []Arg{
			op(8, "%r10", reg(R("r10", 56))),
			op(8, "%rax", reg(R("rax", 80))),
			op(8, "%rdx", reg(R("rdx", 96))),
			op(-4, "%ecx", reg(R("ecx", 88))),
			op(8, "%rsi", reg(R("rsi", 104))),
			op(-4, "%edi", reg(R("edi", 112))),
			op(8, "%r8", reg(R("r8", 72))),
			op(-4, "%r9d", reg(R("r9d", 64))),
			op(1, "37(%r14)", mem(R("r14", 8), 37)),
		}},
		{"libjvm17.args", "hotspot:class__initialization__recursive", 0, elf.EM_X86_64, []Arg{
			op(8, "%rbx", reg(R("rbx", 40))),
			op(-4, "%r14d", reg(R("r14d", 8))),
			op(8, "%rdi", reg(R("rdi", 112))),
			op(-4, "$-1", cnst(-1)),
			op(1, "%r15b", reg(R("r15b", 0))),
		}},
		{"libruby3.1.args", "ruby:raise", 0, elf.EM_X86_64, []Arg{
			op(8, "%rax", reg(R("rax", 80))),
			op(8, "48(%rsp)", mem(rsp, 48)),
			op(-4, "100(%rsp)", mem(rsp, 100)),
		}},
		{"libruby3.1.args", "ruby:gc__mark__begin", 0, elf.EM_X86_64, nil},

		// Fixtures, one per shape and architecture.
		{"usdt_sample.args", "sample:sizes", 0, elf.EM_X86_64, []Arg{
			op(-1, "%dil", reg(R("dil", 112))),
			op(1, "%r8b", reg(R("r8b", 72))),
			op(-2, "%cx", reg(R("cx", 88))),
			op(2, "%r10w", reg(R("r10w", 56))),
			op(-4, "%edx", reg(R("edx", 96))),
			op(4, "%ebp", reg(R("ebp", 32))),
			op(-8, "%r11", reg(R("r11", 48))),
			op(8, "%rax", reg(R("rax", 80))),
		}},
		{"usdt_sample.args", "sample:consts", 0, elf.EM_X86_64, []Arg{
			op(-4, "$5", cnst(5)),
			op(-4, "$-9", cnst(-9)),
			op(-1, "$-1", cnst(-1)),
			op(2, "$-1", cnst(-1)),
			op(-8, "$9223372036854775807", cnst(9223372036854775807)),
		}},
		{"usdt_sample.args", "sample:sib", 0, elf.EM_X86_64, []Arg{
			op(-4, "(%rdi,%rsi,4)", sib(R("rdi", 112), R("rsi", 104), 4, 0)),
			op(-8, "%rsi", reg(R("rsi", 104))),
		}},
		{"usdt_sample.args", "sample:global", 0, elf.EM_X86_64, []Arg{
			op(-4, "sample_global_counter(%rip)", pcrel("sample_global_counter", 0)),
			op(8, "sample_global_wide(%rip)", pcrel("sample_global_wide", 0)),
		}},
		{"usdt_sample.args", "sample:zero", 0, elf.EM_X86_64, nil},
		{"usdt_sample_O0.args", "sample:sizes", 0, elf.EM_X86_64, []Arg{
			op(-1, "-1(%rbp)", mem(rbp, -1)),
			op(1, "-2(%rbp)", mem(rbp, -2)),
			op(-2, "-4(%rbp)", mem(rbp, -4)),
			op(2, "-6(%rbp)", mem(rbp, -6)),
			op(-4, "-12(%rbp)", mem(rbp, -12)),
			op(4, "-16(%rbp)", mem(rbp, -16)),
			op(-8, "-24(%rbp)", mem(rbp, -24)),
			op(8, "-32(%rbp)", mem(rbp, -32)),
		}},
		{"usdt_sample_i386.args", "sample:sizes", 0, elf.EM_386, []Arg{
			op(-1, "%edx", reg(R("edx", 8))),
			op(1, "11(%esp)", mem(R("esp", 60), 11)),
			op(-2, "12(%esp)", mem(R("esp", 60), 12)),
			op(2, "14(%esp)", mem(R("esp", 60), 14)),
			op(-4, "(%esp)", mem(R("esp", 60), 0)),
			op(4, "4(%esp)", mem(R("esp", 60), 4)),
			op(-8, "%esi", unsup(errRegPair)),
			op(8, "%ecx", unsup(errRegPair)),
		}},
		{"usdt_sample_i386.args", "sample:global", 0, elf.EM_386, []Arg{
			op(-4, "sample_global_counter@GOTOFF(%ebx)", Arg{Kind: PCRel, Reg: R("ebx", 0), Symbol: "sample_global_counter"}),
			op(8, "sample_global_wide@GOTOFF(%ebx)", Arg{Kind: PCRel, Reg: R("ebx", 0), Symbol: "sample_global_wide"}),
		}},
		{"usdt_sample_i386.args", "sample:sib", 0, elf.EM_386, []Arg{
			op(-4, "(%eax,%edx,4)", sib(R("eax", 24), R("edx", 8), 4, 0)),
			op(-4, "%edx", reg(R("edx", 8))),
		}},
		{"usdt_sample_aarch64.args", "sample:global", 0, elf.EM_AARCH64, []Arg{
			op(-4, "[x2, #:lo12:.LANCHOR0]", unsup(errReloc)),
			op(8, "[x4, 8]", mem(R("x4", 32), 8)),
		}},
		{"usdt_sample_aarch64.args", "sample:mem", 0, elf.EM_AARCH64, []Arg{
			op(-8, "[x0]", mem(R("x0", 0), 0)),
			op(-4, "[x0, 8]", mem(R("x0", 0), 8)),
			op(-2, "[x0, 12]", mem(R("x0", 0), 12)),
			op(-1, "[x0, 14]", mem(R("x0", 0), 14)),
		}},
		{"usdt_sample_aarch64.args", "sample:consts", 0, elf.EM_AARCH64, []Arg{
			op(-4, "5", cnst(5)),
			op(-4, "-9", cnst(-9)),
			op(-1, "-1", cnst(-1)),
			op(2, "-1", cnst(-1)),
			op(-8, "9223372036854775807", cnst(9223372036854775807)),
		}},
		{"usdt_sample_armhf.args", "sample:sib", 0, elf.EM_ARM, []Arg{
			op(-4, "[r0, r1, lsl #2]", sib(R("r0", 0), R("r1", 4), 4, 0)),
			op(-4, "r1", reg(R("r1", 4))),
		}},
		{"usdt_sample_armhf.args", "sample:sizes", 0, elf.EM_ARM, []Arg{
			op(-1, "r4", reg(R("r4", 16))),
			op(1, "r2", reg(R("r2", 8))),
			op(-2, "r5", reg(R("r5", 20))),
			op(2, "r3", reg(R("r3", 12))),
			op(-4, "ip", reg(R("ip", 48))),
			op(4, "r10", reg(R("r10", 40))),
			op(-8, "r6", reg(R("r6", 24))),
			op(8, "r8", reg(R("r8", 32))),
		}},
		{"usdt_sample_armhf.args", "sample:consts", 0, elf.EM_ARM, []Arg{
			op(-4, "#5", cnst(5)),
			op(-4, "#-9", cnst(-9)),
			op(-1, "#-1", cnst(-1)),
			op(2, "#-1", cnst(-1)),
			op(-8, "#9223372036854775807", cnst(9223372036854775807)),
		}},
		{"usdt_sample_s390x.args", "sample:sib", 0, elf.EM_S390, []Arg{
			op(-4, "0(%r1,%r2)", sib(R("r2", 40), R("r1", 32), 1, 0)),
			op(-8, "%r3", reg(R("r3", 48))),
		}},
		{"usdt_sample_s390x.args", "sample:mem", 0, elf.EM_S390, []Arg{
			op(-8, "0(%r2)", mem(R("r2", 40), 0)),
			op(-4, "8(%r2)", mem(R("r2", 40), 8)),
			op(-2, "12(%r2)", mem(R("r2", 40), 12)),
			op(-1, "14(%r2)", mem(R("r2", 40), 14)),
		}},
		{"usdt_sample_riscv64.args", "sample:sizes", 0, elf.EM_RISCV, []Arg{
			op(-1, "t1", reg(R("t1", 48))),
			op(1, "a7", reg(R("a7", 136))),
			op(-2, "a6", reg(R("a6", 128))),
			op(2, "a2", reg(R("a2", 96))),
			op(-4, "a4", reg(R("a4", 112))),
			op(4, "a3", reg(R("a3", 104))),
			op(-8, "t3", reg(R("t3", 224))),
			op(8, "a5", reg(R("a5", 120))),
		}},
		{"usdt_sample_riscv64.args", "sample:global", 0, elf.EM_RISCV, []Arg{
			op(-4, "0(a5)", mem(R("a5", 120), 0)),
			op(8, "8(a5)", mem(R("a5", 120), 8)),
		}},
		{"usdt_sample_ppc64le.args", "sample:sib", 0, elf.EM_PPC64, []Arg{
			op(-4, "3,9", sib(R("r3", 24), R("r9", 72), 1, 0)),
			op(-8, "4", reg(R("r4", 32))),
		}},
		{"usdt_sample_ppc64.args", "sample:consts", 0, elf.EM_PPC64, []Arg{
			op(-4, "i5", cnst(5)),
			op(-4, "i-9", cnst(-9)),
			op(-1, "i-1", cnst(-1)),
			op(2, "i-1", cnst(-1)),
			op(-8, "i9223372036854775807", cnst(9223372036854775807)),
		}},
		{"usdt_sample_ppc64.args", "sample:twelve", 0, elf.EM_PPC64, []Arg{
			op(-8, "0(9)", mem(R("r9", 72), 0)),
			op(-8, "0(10)", mem(R("r10", 80), 0)),
			op(-8, "0(8)", mem(R("r8", 64), 0)),
			op(-8, "0(7)", mem(R("r7", 56), 0)),
			op(-8, "0(6)", mem(R("r6", 48), 0)),
			op(-8, "0(5)", mem(R("r5", 40), 0)),
			op(-8, "0(3)", mem(R("r3", 24), 0)),
			op(-8, "0(11)", mem(R("r11", 88), 0)),
			op(-8, "0(31)", mem(R("r31", 248), 0)),
			op(-8, "0(30)", mem(R("r30", 240), 0)),
			op(-8, "0(29)", mem(R("r29", 232), 0)),
			op(-8, "0(28)", mem(R("r28", 224), 0)),
		}},
	} {
		t.Run(tc.file+"/"+tc.probe, func(t *testing.T) {
			var found []note
			for _, n := range readNotes(t, tc.file) {
				if n.probe == tc.probe {
					found = append(found, n)
				}
			}
			if tc.nth >= len(found) {
				t.Fatalf("%s has %d notes of %s", tc.file, len(found), tc.probe)
			}
			in := found[tc.nth].args
			if tc.want == nil {
				got, err := Parse(tc.machine, in)
				if got != nil || err != nil {
					t.Fatalf("Parse(%q) = %v, %v, want nil, nil", in, got, err)
				}
				return
			}
			checkParse(t, parseCase{tc.machine, in, tc.want})
		})
	}
}

// TestFixtureArchitecturesAgree: the seven fixture builds come from one
// source, so every probe has the same argument count and sizes on every
// architecture (a check that each grammar split the same arguments).
func TestFixtureArchitecturesAgree(t *testing.T) {
	shape := func(file string, m elf.Machine) map[string]string {
		out := map[string]string{}
		for _, n := range readNotes(t, file) {
			args, err := Parse(m, n.args)
			if err != nil {
				t.Fatalf("%s %s: %v", file, n.probe, err)
			}
			var b strings.Builder
			for _, a := range args {
				b.WriteString(strings.SplitN(a.String(), "@", 2)[0])
				b.WriteByte(' ')
			}
			out[n.probe] = b.String()
		}
		return out
	}
	ref := shape("usdt_sample.args", elf.EM_X86_64)
	for _, rf := range realFiles {
		if !strings.HasPrefix(rf.file, "usdt_sample") {
			continue
		}
		got := shape(rf.file, rf.machine)
		// sizes of 8-byte arguments on 32-bit machines are what the
		// compiler says; the count of arguments must agree everywhere.
		for probe, want := range ref {
			if len(strings.Fields(got[probe])) != len(strings.Fields(want)) {
				t.Errorf("%s %s: sizes %q, x86-64 has %q", rf.file, probe, got[probe], want)
			}
		}
		if !reflect.DeepEqual(keys(got), keys(ref)) {
			t.Errorf("%s probes %v, x86-64 has %v", rf.file, keys(got), keys(ref))
		}
	}
}

func keys(m map[string]string) map[string]bool {
	k := map[string]bool{}
	for p := range m {
		k[p] = true
	}
	return k
}
