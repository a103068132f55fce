package argspec

import (
	"debug/elf"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/probekit/probekit/internal/test/testkit"
)

func TestMain(m *testing.M) { os.Exit(testkit.RunWithLeakCheck(m)) }

// op builds an expected argument: a negative size means signed.
func op(size int, operand string, a Arg) Arg {
	a.Size, a.Signed = size, size < 0
	if size < 0 {
		a.Size = -size
	}
	a.Operand = operand
	return a
}

// opf is op for a float argument.
func opf(size int, operand string, a Arg) Arg {
	a = op(size, operand, a)
	a.Float = true
	return a
}

func R(name string, off uint16) Register { return Register{Name: name, Offset: off} }

func cnst(v int64) Arg              { return Arg{Kind: Const, Value: v} }
func reg(r Register) Arg            { return Arg{Kind: Reg, Reg: r} }
func mem(r Register, off int64) Arg { return Arg{Kind: Mem, Reg: r, Offset: off} }
func pcrel(sym string, off int64) Arg {
	return Arg{Kind: PCRel, Reg: R("rip", 128), Symbol: sym, Offset: off}
}
func sib(b, i Register, s int, off int64) Arg {
	return Arg{Kind: SIB, Reg: b, Index: i, Scale: s, Offset: off}
}
func unsup(reason error) Arg { return Arg{Kind: Unsupported, Reason: reason.Error()} }

type parseCase struct {
	machine elf.Machine
	in      string
	want    []Arg
}

// realStrings are argument strings seen in real binaries and in libbpf's,
// bcc's and parca's tests (OpenJDK, Python, Ruby), with the exact decoding.
var realStrings = []parseCase{
	// libbpf selftest test:usdt12.
	{elf.EM_X86_64, "-4@-1204(%rbp) -4@%edi -8@-1216(%rbp) -8@%r8 -4@$5 -8@%r9 8@%rdx 8@%r10 -4@$-9 -2@%cx -2@%ax -1@%sil", []Arg{
		op(-4, "-1204(%rbp)", mem(R("rbp", 32), -1204)),
		op(-4, "%edi", reg(R("edi", 112))),
		op(-8, "-1216(%rbp)", mem(R("rbp", 32), -1216)),
		op(-8, "%r8", reg(R("r8", 72))),
		op(-4, "$5", cnst(5)),
		op(-8, "%r9", reg(R("r9", 64))),
		op(8, "%rdx", reg(R("rdx", 96))),
		op(8, "%r10", reg(R("r10", 56))),
		op(-4, "$-9", cnst(-9)),
		op(-2, "%cx", reg(R("cx", 88))),
		op(-2, "%ax", reg(R("ax", 80))),
		op(-1, "%sil", reg(R("sil", 104))),
	}},
	// Python function__entry (Fedora).
	{elf.EM_X86_64, "8@%r14 8@%r15 -4@%eax", []Arg{
		op(8, "%r14", reg(R("r14", 8))),
		op(8, "%r15", reg(R("r15", 0))),
		op(-4, "%eax", reg(R("eax", 80))),
	}},
	// Ruby method__entry.
	{elf.EM_X86_64, "8@(%rsp) 8@8(%rsp) 8@16(%rsp) -4@24(%rsp)", []Arg{
		op(8, "(%rsp)", mem(R("rsp", 152), 0)),
		op(8, "8(%rsp)", mem(R("rsp", 152), 8)),
		op(8, "16(%rsp)", mem(R("rsp", 152), 16)),
		op(-4, "24(%rsp)", mem(R("rsp", 152), 24)),
	}},
	{elf.EM_X86_64, "8@$18446744073709551614 8@1600(%rax) 4@(%rax)", []Arg{
		op(8, "$18446744073709551614", cnst(-2)),
		op(8, "1600(%rax)", mem(R("rax", 80), 1600)),
		op(4, "(%rax)", mem(R("rax", 80), 0)),
	}},
	// SIB, with and without displacement and scale.
	{elf.EM_X86_64, "1@-96(%rbp,%rax,8) 8@(%rax,%rdx,8) 4@(%rbx,%rcx) -2@(%rdx,%rax,2)", []Arg{
		op(1, "-96(%rbp,%rax,8)", sib(R("rbp", 32), R("rax", 80), 8, -96)),
		op(8, "(%rax,%rdx,8)", sib(R("rax", 80), R("rdx", 96), 8, 0)),
		op(4, "(%rbx,%rcx)", sib(R("rbx", 40), R("rcx", 88), 1, 0)),
		op(-2, "(%rdx,%rax,2)", sib(R("rdx", 96), R("rax", 80), 2, 0)),
	}},
	// PC-relative with a symbol and an addend in every order.
	{elf.EM_X86_64, "-4@global_max_action(%rip) 8@24+mp_(%rip) -4@CheckpointStats+40(%rip) 4@glob-2(%rip) -1@ti(%rip) -4@40+CheckpointStats(%rip) 8@16(%rip)", []Arg{
		op(-4, "global_max_action(%rip)", pcrel("global_max_action", 0)),
		op(8, "24+mp_(%rip)", pcrel("mp_", 24)),
		op(-4, "CheckpointStats+40(%rip)", pcrel("CheckpointStats", 40)),
		op(4, "glob-2(%rip)", pcrel("glob", -2)),
		op(-1, "ti(%rip)", pcrel("ti", 0)),
		op(-4, "40+CheckpointStats(%rip)", pcrel("CheckpointStats", 40)),
		op(8, "16(%rip)", pcrel("", 16)),
	}},
	// glibc pthread_start (Fedora): xmm is unsupported, the rest parses.
	{elf.EM_X86_64, "8@%xmm0 8@%rdi", []Arg{
		op(8, "%xmm0", unsup(errVector)),
		op(8, "%rdi", reg(R("rdi", 112))),
	}},
	// parca: float arguments.
	{elf.EM_X86_64, "-4f@$5 -8f@-8(%rbp)", []Arg{
		opf(-4, "$5", cnst(5)),
		opf(-8, "-8(%rbp)", mem(R("rbp", 32), -8)),
	}},
	// OpenJDK on arm64.
	{elf.EM_AARCH64, "8@x22 8@x20 8@x23 8@x0 8@x26 8@x27 8@[sp, 112] 8@[sp, 120]", []Arg{
		op(8, "x22", reg(R("x22", 176))),
		op(8, "x20", reg(R("x20", 160))),
		op(8, "x23", reg(R("x23", 184))),
		op(8, "x0", reg(R("x0", 0))),
		op(8, "x26", reg(R("x26", 208))),
		op(8, "x27", reg(R("x27", 216))),
		op(8, "[sp, 112]", mem(R("sp", 248), 112)),
		op(8, "[sp, 120]", mem(R("sp", 248), 120)),
	}},
	// bcc's arm64 test; x31 is not a register name (bcc read sp for it,
	// reading regs[31] overran: iovisor/bcc#2790).
	{elf.EM_AARCH64, "-1@x0 4@5 8@[x12] -4@[x30,-40] -4@[x31,-40] 8@[sp, 120]", []Arg{
		op(-1, "x0", reg(R("x0", 0))),
		op(4, "5", cnst(5)),
		op(8, "[x12]", mem(R("x12", 96), 0)),
		op(-4, "[x30,-40]", mem(R("x30", 240), -40)),
		op(-4, "[x31,-40]", unsup(errUnknownReg)),
		op(8, "[sp, 120]", mem(R("sp", 248), 120)),
	}},
	{elf.EM_AARCH64, "-8@x4 8@sp 8@[x0] -1@[x0, x1] -8@v0 4@[x21, #:lo12:.LANCHOR2] 4@[x32,200]", []Arg{
		op(-8, "x4", reg(R("x4", 32))),
		op(8, "sp", reg(R("sp", 248))),
		op(8, "[x0]", mem(R("x0", 0), 0)),
		op(-1, "[x0, x1]", sib(R("x0", 0), R("x1", 8), 1, 0)),
		op(-8, "v0", unsup(errVector)),
		op(4, "[x21, #:lo12:.LANCHOR2]", unsup(errReloc)),
		op(4, "[x32,200]", unsup(errUnknownReg)),
	}},
	{elf.EM_S390, "-2@-28(%r15) -8@%r0 4@71", []Arg{
		op(-2, "-28(%r15)", mem(R("r15", 144), -28)),
		op(-8, "%r0", reg(R("r0", 24))),
		op(4, "71", cnst(71)),
	}},
	{elf.EM_S390, "4@108(%r7) -2@-4(%r6) 8@0 4@8(%r1,%r2)", []Arg{
		op(4, "108(%r7)", mem(R("r7", 80), 108)),
		op(-2, "-4(%r6)", mem(R("r6", 72), -4)),
		op(8, "0", cnst(0)),
		op(4, "8(%r1,%r2)", sib(R("r2", 40), R("r1", 32), 1, 8)),
	}},
	{elf.EM_RISCV, "-8@-88(s0) -8@a1 4@5", []Arg{
		op(-8, "-88(s0)", mem(R("s0", 64), -88)),
		op(-8, "a1", reg(R("a1", 88))),
		op(4, "5", cnst(5)),
	}},
	{elf.EM_RISCV, "-4@s5 4@20(s1) -4@-1 8@-72(s0)", []Arg{
		op(-4, "s5", reg(R("s5", 168))),
		op(4, "20(s1)", mem(R("s1", 72), 20)),
		op(-4, "-1", cnst(-1)),
		op(8, "-72(s0)", mem(R("s0", 64), -72)),
	}},
	{elf.EM_ARM, "-4@[fp, #96] -4@[sp] 4@#5 -8@r4", []Arg{
		op(-4, "[fp, #96]", mem(R("fp", 44), 96)),
		op(-4, "[sp]", mem(R("sp", 52), 0)),
		op(4, "#5", cnst(5)),
		op(-8, "r4", reg(R("r4", 16))),
	}},
	// bcc's ppc64 test. A bare number is a register; RA=0 in a D-form
	// address is the value 0, so "0(%r0)" is an absolute address.
	{elf.EM_PPC64, "-4@0 8@%r0 8@i0 4@0(%r0) -2@0(0) -8@i9 -4@16(6) 4@i-67", []Arg{
		op(-4, "0", reg(R("r0", 0))),
		op(8, "%r0", reg(R("r0", 0))),
		op(8, "i0", cnst(0)),
		op(4, "0(%r0)", unsup(errZeroBase)),
		op(-2, "0(0)", unsup(errZeroBase)),
		op(-8, "i9", cnst(9)),
		op(-4, "16(6)", mem(R("r6", 48), 16)),
		op(4, "i-67", cnst(-67)),
	}},
	{elf.EM_PPC64, "8@9,10 8@0,10 -4@-12(42) 8@f1", []Arg{
		op(8, "9,10", sib(R("r9", 72), R("r10", 80), 1, 0)),
		op(8, "0,10", mem(R("r10", 80), 0)),
		op(-4, "-12(42)", unsup(errUnknownReg)),
		op(8, "f1", unsup(errVector)),
	}},
	// bcc's loongarch test: $r0 is the zero register.
	{elf.EM_LOONGARCH, "-1@$r0 4@5 8@[$r12] -4@[$r30,-40] 8@[sp, 120]", []Arg{
		op(-1, "$r0", cnst(0)),
		op(4, "5", cnst(5)),
		op(8, "[$r12]", mem(R("r12", 96), 0)),
		op(-4, "[$r30,-40]", mem(R("r30", 240), -40)),
		op(8, "[sp, 120]", mem(R("sp", 24), 120)),
	}},
	{elf.EM_386, "-4@%eax 4@8(%ebp) 2@%si 1@(%eax,%ecx,4) 4@%ah 4@sym@GOTOFF(%ebx) 8@%rax", []Arg{
		op(-4, "%eax", reg(R("eax", 24))),
		op(4, "8(%ebp)", mem(R("ebp", 20), 8)),
		op(2, "%si", reg(R("si", 12))),
		op(1, "(%eax,%ecx,4)", sib(R("eax", 24), R("ecx", 4), 4, 0)),
		op(4, "%ah", unsup(errHighByte)),
		op(4, "sym@GOTOFF(%ebx)", Arg{Kind: PCRel, Reg: R("ebx", 0), Symbol: "sym"}),
		op(8, "%rax", unsup(errUnknownReg)),
	}},
}

// edgeStrings are odd but valid inputs: whitespace, spacing libbpf's
// sscanf accepts, zero registers, operands no BPF program can read.
var edgeStrings = []parseCase{
	{elf.EM_X86_64, "", nil},
	{elf.EM_X86_64, " \t\n ", nil},
	{elf.EM_X86_64, "  8@%rdi   -4@$5 ", []Arg{
		op(8, "%rdi", reg(R("rdi", 112))),
		op(-4, "$5", cnst(5)),
	}},
	{elf.EM_X86_64, "-4 @ -8 (%rbp) 8@( %rax , %rbx , 2 )", []Arg{
		op(-4, "-8 (%rbp)", mem(R("rbp", 32), -8)),
		op(8, "( %rax , %rbx , 2 )", sib(R("rax", 80), R("rbx", 40), 2, 0)),
	}},
	{elf.EM_X86_64, "8@$0x10 8@-9223372036854775808(%rax) 1@%r15b -2@%r15w 4@%r9d", []Arg{
		op(8, "$0x10", cnst(16)),
		op(8, "-9223372036854775808(%rax)", mem(R("rax", 80), -9223372036854775808)),
		op(1, "%r15b", reg(R("r15b", 0))),
		op(-2, "%r15w", reg(R("r15w", 0))),
		op(4, "%r9d", reg(R("r9d", 64))),
	}},
	{elf.EM_X86_64, "8@%fs:8 8@%fs:(%rax) 8@$sym 8@1234 8@table(,%rax,8) 8@sym(%rax) 8@%st(1) 8@-sym(%rip) 8@a+b(%rip)", []Arg{
		op(8, "%fs:8", unsup(errSegment)),
		op(8, "%fs:(%rax)", unsup(errSegment)),
		op(8, "$sym", unsup(errSymConst)),
		op(8, "1234", unsup(errAbsolute)),
		op(8, "table(,%rax,8)", unsup(errAbsolute)),
		op(8, "sym(%rax)", unsup(errSymBase)),
		op(8, "%st(1)", unsup(errUnknownReg)),
		op(8, "-sym(%rip)", unsup(errSymExpr)),
		op(8, "a+b(%rip)", unsup(errSymExpr)),
	}},
	{elf.EM_AARCH64, "8@xzr 4@wzr 4@w3 8@fp 8@lr 8@[x1, #-8] 8@[x1, x2, lsl 3] 8@[x1, x2, lsl #2] 8@[x1, w2, sxtw] 8@[x1, 8]! 8@q1 4@#7", []Arg{
		op(8, "xzr", cnst(0)),
		op(4, "wzr", cnst(0)),
		op(4, "w3", reg(R("w3", 24))),
		op(8, "fp", reg(R("fp", 232))),
		op(8, "lr", reg(R("lr", 240))),
		op(8, "[x1, #-8]", mem(R("x1", 8), -8)),
		op(8, "[x1, x2, lsl 3]", sib(R("x1", 8), R("x2", 16), 8, 0)),
		op(8, "[x1, x2, lsl #2]", sib(R("x1", 8), R("x2", 16), 4, 0)),
		op(8, "[x1, w2, sxtw]", unsup(errExtend)),
		op(8, "[x1, 8]!", unsup(errWriteback)),
		op(8, "q1", unsup(errVector)),
		op(4, "#7", cnst(7)),
	}},
	{elf.EM_386, "4@x@GOTOFF+8(%ebx) 4@4+x@GOTOFF-1(%ebx) 4@x@GOT(%ebx) 4@x@GOTOFF(%ebx,%eax,4) 4@x@GOTOFF 4@%gs:0", []Arg{
		op(4, "x@GOTOFF+8(%ebx)", Arg{Kind: PCRel, Reg: R("ebx", 0), Symbol: "x", Offset: 8}),
		op(4, "4+x@GOTOFF-1(%ebx)", Arg{Kind: PCRel, Reg: R("ebx", 0), Symbol: "x", Offset: 3}),
		op(4, "x@GOT(%ebx)", unsup(errReloc)),
		op(4, "x@GOTOFF(%ebx,%eax,4)", unsup(errSymExpr)),
		op(4, "x@GOTOFF", unsup(errAbsolute)),
		op(4, "%gs:0", unsup(errSegment)),
	}},
	{elf.EM_ARM, "4@sl 4@ip 4@pc 4@[r0, r1] 4@[r2, #-4] 8@d0 4@#-5", []Arg{
		op(4, "sl", reg(R("sl", 40))),
		op(4, "ip", reg(R("ip", 48))),
		op(4, "pc", reg(R("pc", 60))),
		op(4, "[r0, r1]", sib(R("r0", 0), R("r1", 4), 1, 0)),
		op(4, "[r2, #-4]", mem(R("r2", 8), -4)),
		op(8, "d0", unsup(errVector)),
		op(4, "#-5", cnst(-5)),
	}},
	{elf.EM_RISCV, "8@zero 8@x0 8@fp 8@t6 8@(a0) 8@0(zero) 8@fa0 4@%lo(sym)(a5) 8@sym(a0)", []Arg{
		op(8, "zero", cnst(0)),
		op(8, "x0", cnst(0)),
		op(8, "fp", reg(R("fp", 64))),
		op(8, "t6", reg(R("t6", 248))),
		op(8, "(a0)", mem(R("a0", 80), 0)),
		op(8, "0(zero)", unsup(errAbsolute)),
		op(8, "fa0", unsup(errVector)),
		op(4, "%lo(sym)(a5)", unsup(errReloc)),
		op(8, "sym(a0)", unsup(errSymBase)),
	}},
	{elf.EM_S390, "8@(%r2) 8@%f0 8@8(,%r3)", []Arg{
		op(8, "(%r2)", mem(R("r2", 40), 0)),
		op(8, "%f0", unsup(errVector)),
		op(8, "8(,%r3)", mem(R("r3", 48), 8)),
	}},
	{elf.EM_PPC64, "8@r31 8@%r3,%r4 8@%3 8@i0x10 8@32", []Arg{
		op(8, "r31", reg(R("r31", 248))),
		op(8, "%r3,%r4", sib(R("r3", 24), R("r4", 32), 1, 0)),
		op(8, "%3", reg(R("r3", 24))),
		op(8, "i0x10", cnst(16)),
		op(8, "32", unsup(errUnknownReg)),
	}},
	{elf.EM_LOONGARCH, "8@$a0 8@$sp 8@$fp 8@[$r3, $r4] 8@$f0 8@zero", []Arg{
		op(8, "$a0", reg(R("a0", 32))),
		op(8, "$sp", reg(R("sp", 24))),
		op(8, "$fp", reg(R("fp", 176))),
		op(8, "[$r3, $r4]", sib(R("r3", 24), R("r4", 32), 1, 0)),
		op(8, "$f0", unsup(errVector)),
		op(8, "zero", cnst(0)),
	}},
}

func checkParse(t *testing.T, tc parseCase) {
	t.Helper()
	got, err := Parse(tc.machine, tc.in)
	if err != nil {
		t.Fatalf("Parse(%v, %q): %v", tc.machine, tc.in, err)
	}
	want := tc.want
	for i := range want {
		want[i].Machine = tc.machine
	}
	if len(got) != len(want) {
		t.Fatalf("Parse(%v, %q): %d args, want %d: %v", tc.machine, tc.in, len(got), len(want), got)
	}
	for i := range want {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Errorf("Parse(%v, %q) arg %d:\n got %#v\nwant %#v", tc.machine, tc.in, i+1, got[i], want[i])
		}
	}
	checkRoundTrip(t, tc.machine, got)
}

// checkRoundTrip proves the Format contract: parsing the canonical form
// gives the same arguments except for Operand, which becomes the canonical
// text (for Unsupported arguments, which keep their text, exactly the
// same), and formatting is idempotent.
func checkRoundTrip(t *testing.T, machine elf.Machine, args []Arg) {
	t.Helper()
	s := Format(args)
	again, err := Parse(machine, s)
	if err != nil {
		t.Fatalf("Parse(Format(args)) = Parse(%v, %q): %v", machine, s, err)
	}
	if len(again) != len(args) {
		t.Fatalf("Parse(%q): %d args, want %d", s, len(again), len(args))
	}
	for i := range args {
		want := args[i]
		if want.Kind != Unsupported {
			want.Operand = again[i].Operand
			if !strings.HasSuffix(want.String(), "@"+again[i].Operand) {
				t.Errorf("canonical operand %q is not the text after '@' in %q", again[i].Operand, want.String())
			}
		}
		if !reflect.DeepEqual(again[i], want) {
			t.Errorf("round trip of %q arg %d:\n got %#v\nwant %#v", s, i+1, again[i], want)
		}
	}
	if s2 := Format(again); s2 != s {
		t.Errorf("Format not idempotent: %q then %q", s, s2)
	}
}

func TestParseRealStrings(t *testing.T) {
	for _, tc := range realStrings {
		t.Run(tc.machine.String()+"/"+tc.in, func(t *testing.T) { checkParse(t, tc) })
	}
}

func TestParseEdgeCases(t *testing.T) {
	for _, tc := range edgeStrings {
		t.Run(tc.machine.String()+"/"+tc.in, func(t *testing.T) { checkParse(t, tc) })
	}
}

func TestParseCanonical(t *testing.T) {
	for _, tc := range []struct {
		machine elf.Machine
		in, out string
	}{
		{elf.EM_X86_64, "8@$18446744073709551614 4@(%rbx,%rcx) 8@24+mp_(%rip) -4@-8 (%rbp)", "8@$-2 4@(%rbx,%rcx,1) 8@mp_+24(%rip) -4@-8(%rbp)"},
		{elf.EM_X86_64, "8@%xmm0  8@0(%rax) 8@(%rip)", "8@%xmm0 8@(%rax) 8@(%rip)"},
		{elf.EM_AARCH64, "8@[sp,112] 8@[x0,#0] 8@xzr 8@[x1, x2, lsl #0]", "8@[sp, 112] 8@[x0] 8@0 8@[x1, x2]"},
		{elf.EM_ARM, "4@5 4@[fp,#96]", "4@#5 4@[fp, #96]"},
		{elf.EM_LOONGARCH, "8@[sp,120] 8@$r0", "8@[$sp, 120] 8@0"},
		{elf.EM_S390, "4@(%r2) 4@8(%r1,%r2)", "4@0(%r2) 4@8(%r1,%r2)"},
		{elf.EM_RISCV, "4@(a0) 4@x0", "4@0(a0) 4@0"},
		{elf.EM_PPC64, "4@3 4@16(6) 4@9,10", "4@%r3 4@16(%r6) 4@%r9,%r10"},
		{elf.EM_386, "4@%eax 4@8+x@GOTOFF(%ebx) 4@x@GOTOFF-8(%ebx)", "4@%eax 4@x@GOTOFF+8(%ebx) 4@x@GOTOFF-8(%ebx)"},
	} {
		args, err := Parse(tc.machine, tc.in)
		if err != nil {
			t.Fatalf("Parse(%v, %q): %v", tc.machine, tc.in, err)
		}
		if got := Format(args); got != tc.out {
			t.Errorf("Format(Parse(%v, %q)) = %q, want %q", tc.machine, tc.in, got, tc.out)
		}
		checkRoundTrip(t, tc.machine, args)
	}
}

func TestParseErrors(t *testing.T) {
	thirteen := strings.TrimSpace(strings.Repeat("1@$1 ", 13))
	for _, tc := range []struct {
		machine  elf.Machine
		in       string
		arg, col int
		expected string
		found    string
	}{
		{elf.EM_X86_64, thirteen, 13, 61, "at most 12 arguments", "1@$1"},
		{elf.EM_X86_64, "3@%rdi", 1, 1, "argument size 1, 2, 4 or 8", "3@%rdi"},
		{elf.EM_X86_64, "-16@%rdi", 1, 2, "argument size 1, 2, 4 or 8", "16@%rdi"},
		{elf.EM_X86_64, "-0@%rdi", 1, 2, "argument size 1, 2, 4 or 8", "0@%rdi"},
		{elf.EM_X86_64, "99999999999999999999999@%rdi", 1, 1, "argument size 1, 2, 4 or 8", "99999999999999999999999@"},
		{elf.EM_X86_64, "+4@%rdi", 1, 1, "argument size (1, 2, 4 or 8, negative if signed)", "+4@%rdi"},
		{elf.EM_X86_64, "8@%rdi +4@%rsi", 2, 8, "argument size (1, 2, 4 or 8, negative if signed)", "+4@%rsi"},
		{elf.EM_X86_64, "%rdi", 1, 1, "argument size (1, 2, 4 or 8, negative if signed)", "%rdi"},
		{elf.EM_X86_64, "8%rdi", 1, 2, "'@' after the argument size", "%rdi"},
		{elf.EM_X86_64, "garbage", 1, 1, "argument size (1, 2, 4 or 8, negative if signed)", "garbage"},
		{elf.EM_X86_64, "8@%rdi garbage", 1, 8, "end of operand", "garbage"},
		{elf.EM_X86_64, "8@", 1, 3, "an operand after '@'", ""},
		{elf.EM_X86_64, "8@ 4@%rdi", 1, 3, "an operand after '@'", " 4@%rdi"},
		{elf.EM_X86_64, "8@(%rdi", 1, 8, "closing ')' or ']'", ""},
		{elf.EM_X86_64, "8@%rdi) 4@$1", 1, 7, "no unmatched ')'", ") 4@$1"},
		{elf.EM_X86_64, "8@$99999999999999999999", 1, 4, "a number that fits in 64 bits", "99999999999999999999"},
		{elf.EM_X86_64, "8@$", 1, 4, "a number", ""},
		{elf.EM_X86_64, "1@(%rax,%rbx,3)", 1, 14, "scale 1, 2, 4 or 8", "3)"},
		{elf.EM_X86_64, "4@-12(42)", 1, 7, "a base register %REG", "42)"},
		{elf.EM_X86_64, "4@%", 1, 4, "a register name after '%'", ""},
		{elf.EM_X86_64, "4@*8", 1, 3, "a number or a symbol", "*8"},
		{elf.EM_PPC64, "4@i%ra+1r", 1, 4, "a number", "%ra+1r"},
		{elf.EM_AARCH64, "4@[x0 8]", 1, 7, "',' or ']'", "8]"},
		{elf.EM_AARCH64, "4@[]", 1, 4, "a register name", "]"},
		{elf.EM_S390, "4@%r1()", 1, 6, "end of operand", "()"},
		{elf.EM_RISCV, "4@5()", 1, 5, "a base register", ")"},
	} {
		_, err := Parse(tc.machine, tc.in)
		var se *SyntaxError
		if !errors.As(err, &se) {
			t.Errorf("Parse(%v, %q) = %v, want a *SyntaxError", tc.machine, tc.in, err)
			continue
		}
		want := SyntaxError{Machine: tc.machine, Spec: tc.in, Arg: tc.arg, Column: tc.col, Expected: tc.expected, Found: tc.found}
		if *se != want {
			t.Errorf("Parse(%v, %q):\n got %#v\nwant %#v", tc.machine, tc.in, *se, want)
		}
		if msg := se.Error(); !strings.Contains(msg, tc.expected) {
			t.Errorf("message %q does not say what was expected", msg)
		}
	}
}

func TestParseUnsupportedMachine(t *testing.T) {
	for _, m := range []elf.Machine{elf.EM_MIPS, elf.EM_PPC, elf.EM_NONE, elf.EM_SPARCV9} {
		if Supported(m) {
			t.Errorf("Supported(%v) = true", m)
		}
		if _, err := Parse(m, "8@%rdi"); !errors.Is(err, ErrUnsupportedMachine) {
			t.Errorf("Parse(%v) = %v, want ErrUnsupportedMachine", m, err)
		}
	}
	for _, m := range supportedMachines {
		if !Supported(m) {
			t.Errorf("Supported(%v) = false", m)
		}
	}
}

// supportedMachines is every machine Parse accepts.
var supportedMachines = []elf.Machine{
	elf.EM_X86_64, elf.EM_386, elf.EM_AARCH64, elf.EM_ARM,
	elf.EM_S390, elf.EM_RISCV, elf.EM_PPC64, elf.EM_LOONGARCH,
}

func TestRegisterOffsetLookup(t *testing.T) {
	for _, tc := range []struct {
		machine elf.Machine
		name    string
		off     uint16
		ok      bool
	}{
		{elf.EM_X86_64, "rdi", 112, true},
		{elf.EM_X86_64, "%sil", 104, true},
		{elf.EM_X86_64, "xmm0", 0, false},
		{elf.EM_386, "edi", 16, true},
		{elf.EM_386, "sil", 0, false},
		{elf.EM_AARCH64, "sp", 248, true},
		{elf.EM_AARCH64, "x31", 0, false},
		{elf.EM_AARCH64, "xzr", 0, false},
		{elf.EM_RISCV, "a0", 80, true},
		{elf.EM_RISCV, "zero", 0, false},
		{elf.EM_LOONGARCH, "$r3", 24, true},
		{elf.EM_PPC64, "r31", 248, true},
		{elf.EM_MIPS, "r1", 0, false},
	} {
		off, ok := RegisterOffset(tc.machine, tc.name)
		if off != tc.off || ok != tc.ok {
			t.Errorf("RegisterOffset(%v, %q) = %d, %v, want %d, %v", tc.machine, tc.name, off, ok, tc.off, tc.ok)
		}
	}
}

func TestI386ToX8664(t *testing.T) {
	// Every i386 register lands in the x86-64 slot of its 64-bit parent.
	parent := map[string]string{
		"eax": "rax", "ax": "rax", "al": "rax", "ebx": "rbx", "bx": "rbx", "bl": "rbx",
		"ecx": "rcx", "cx": "rcx", "cl": "rcx", "edx": "rdx", "dx": "rdx", "dl": "rdx",
		"esi": "rsi", "si": "rsi", "edi": "rdi", "di": "rdi",
		"ebp": "rbp", "bp": "rbp", "esp": "rsp", "sp": "rsp",
	}
	if len(parent) != len(i386Regs) {
		t.Fatalf("test covers %d i386 names, table has %d", len(parent), len(i386Regs))
	}
	for name, p := range parent {
		off32, ok := RegisterOffset(elf.EM_386, name)
		if !ok {
			t.Fatalf("no i386 %s", name)
		}
		got, ok := I386ToX8664(Register{Name: name, Offset: off32})
		if !ok || got.Name != name || got.Offset != x8664Regs[p] {
			t.Errorf("I386ToX8664(%s) = %+v, %v, want offset %d (%s)", name, got, ok, x8664Regs[p], p)
		}
	}
	if _, ok := I386ToX8664(Register{Name: "r8"}); ok {
		t.Error("I386ToX8664(r8) succeeded")
	}
}

func TestKindString(t *testing.T) {
	want := []string{"unsupported", "const", "reg", "mem", "sib", "pcrel", "unknown"}
	for k, w := range want {
		if got := Kind(k).String(); got != w {
			t.Errorf("Kind(%d) = %q, want %q", k, got, w)
		}
	}
}

func TestSyntaxErrorMessageBounded(t *testing.T) {
	long := "8@%rdi " + strings.Repeat("x", 100000)
	_, err := Parse(elf.EM_X86_64, long)
	if err == nil {
		t.Fatal("no error")
	}
	if n := len(err.Error()); n > 400 {
		t.Errorf("message is %d bytes", n)
	}
}
