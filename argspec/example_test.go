package argspec_test

import (
	"debug/elf"
	"errors"
	"fmt"

	"github.com/probekit/probekit/argspec"
)

// PostgreSQL's checkpoint__done probe on x86-64: PC-relative operands that
// name a symbol, decoded per argument.
func ExampleParse() {
	args, err := argspec.Parse(elf.EM_X86_64, "-4@40+CheckpointStats(%rip) -4@%edi 8@-8(%rbp)")
	if err != nil {
		panic(err)
	}
	for _, a := range args {
		switch a.Kind {
		case argspec.PCRel:
			fmt.Printf("%d bytes signed=%v at %s%+d\n", a.Size, a.Signed, a.Symbol, a.Offset)
		case argspec.Reg:
			fmt.Printf("%d bytes signed=%v in %s (pt_regs+%d)\n", a.Size, a.Signed, a.Reg.Name, a.Reg.Offset)
		case argspec.Mem:
			fmt.Printf("%d bytes signed=%v at %s%+d (pt_regs+%d)\n", a.Size, a.Signed, a.Reg.Name, a.Offset, a.Reg.Offset)
		}
	}
	// Output:
	// 4 bytes signed=true at CheckpointStats+40
	// 4 bytes signed=true in edi (pt_regs+112)
	// 8 bytes signed=false at rbp-8 (pt_regs+32)
}

// The grammar follows the binary's architecture, not the host's: an arm64
// note parses on any machine, and an operand no BPF program can read (the
// SIMD register v0) is reported without failing the others.
func ExampleParse_arm64() {
	args, err := argspec.Parse(elf.EM_AARCH64, "8@x22 8@[sp, 112] -1@[x0, x1] -8@v0")
	if err != nil {
		panic(err)
	}
	for _, a := range args {
		line := fmt.Sprintf("%-10s %s", a.Operand, a.Kind)
		if a.Kind == argspec.Unsupported {
			line += ": " + a.Reason
		}
		fmt.Println(line)
	}
	// Output:
	// x22        reg
	// [sp, 112]  mem
	// [x0, x1]   sib
	// v0         unsupported: floating-point or vector register: pt_regs holds no FP/SIMD state
}

// A malformed string is a *SyntaxError that says where and what was
// expected.
func ExampleSyntaxError() {
	_, err := argspec.Parse(elf.EM_X86_64, "8@%rdi 3@%rsi")
	var se *argspec.SyntaxError
	if errors.As(err, &se) {
		fmt.Printf("argument %d, column %d: expected %s\n", se.Arg, se.Column, se.Expected)
	}
	// Output:
	// argument 2, column 8: expected argument size 1, 2, 4 or 8
}

// Format writes the canonical spelling, which parses back to the same
// arguments.
func ExampleFormat() {
	args, _ := argspec.Parse(elf.EM_X86_64, "8@$18446744073709551614  4@(%rbx,%rcx) 8@24+mp_(%rip)")
	fmt.Println(argspec.Format(args))
	// Output:
	// 8@$-2 4@(%rbx,%rcx,1) 8@mp_+24(%rip)
}

func ExampleRegisterOffset() {
	for _, m := range []elf.Machine{elf.EM_X86_64, elf.EM_386, elf.EM_AARCH64, elf.EM_RISCV} {
		name := map[elf.Machine]string{elf.EM_X86_64: "rdi", elf.EM_386: "edi", elf.EM_AARCH64: "x1", elf.EM_RISCV: "a1"}[m]
		off, ok := argspec.RegisterOffset(m, name)
		fmt.Println(m, name, off, ok)
	}
	// Output:
	// EM_X86_64 rdi 112 true
	// EM_386 edi 16 true
	// EM_AARCH64 x1 8 true
	// EM_RISCV a1 88 true
}

// A 32-bit process on an x86-64 kernel is seen through the 64-bit
// pt_regs: translate each register of an EM_386 argument.
func ExampleI386ToX8664() {
	args, _ := argspec.Parse(elf.EM_386, "-4@%eax 4@8(%ebp)")
	for _, a := range args {
		r, _ := argspec.I386ToX8664(a.Reg)
		fmt.Printf("%s: i386 pt_regs+%d, x86-64 pt_regs+%d\n", a.Reg.Name, a.Reg.Offset, r.Offset)
	}
	// Output:
	// eax: i386 pt_regs+24, x86-64 pt_regs+80
	// ebp: i386 pt_regs+20, x86-64 pt_regs+32
}
