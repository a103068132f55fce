// Package argspec decodes the argument strings of USDT probes.
//
// A `.note.stapsdt` note describes each probe argument as an assembler
// operand, the text the compiler substituted for the operand of an inline
// asm statement in sys/sdt.h: "-4@%edi 8@-8(%rbp) -4@40+CheckpointStats(%rip)"
// on x86-64, "8@x22 8@[sp, 112]" on arm64. Each argument is
// [-]SIZE[f]@OPERAND: '-' for signed, the size in bytes (1, 2, 4 or 8), 'f'
// for floating point. The operand syntax is the target architecture's
// assembler syntax, so Parse takes the e_machine of the ELF file the note
// came from and never looks at the host: an amd64 tracer decodes an arm64
// or big-endian s390x binary correctly.
//
// # Architectures
//
//	machine         constant  register            memory                          example
//	EM_X86_64       $5        %edi %r15b %sil     -8(%rbp) (%rax,%rdx,8) sym(%rip) -4@40+CheckpointStats(%rip)
//	EM_386          $5        %eax %si            8(%esp) x@GOTOFF(%ebx)           -4@(%eax,%edx,4)
//	EM_AARCH64      5         x0 w0 sp fp lr      [sp, 112] [x0] [x0, x1]          8@[sp, 112]
//	EM_ARM          #5        r0 fp ip sp lr sl   [fp, #96] [sp]                   -4@[fp, #96]
//	EM_S390         71        %r0-%r15            -28(%r15) 0(%r1,%r2)             -2@-28(%r15)
//	EM_RISCV        5         a0 s0 fp t6 ...     -88(s0)                          -8@-88(s0)
//	EM_PPC64        i5 i-67   3 %r3 r3            16(6) 3,9                        -4@16(6)
//	EM_LOONGARCH    5         $r4 $a0 sp          [$r12] [$r30, -40]               -4@[$r30,-40]
//
// EM_PPC64 covers ppc64 and ppc64le (the operand syntax does not depend on
// the byte order); EM_RISCV is riscv64. Debian ships no loongarch64 cross
// compiler, so that grammar is tested only with bcc's strings.
//
// # Arguments
//
// An Arg has a Kind: Const (Value), Reg (Reg), Mem (Reg+Offset), SIB
// (Reg+Index*Scale+Offset), PCRel (Symbol+Offset, resolved through the
// symbol table and the load bias, no register read) or Unsupported (with a
// Reason). Registers carry the byte offset of their slot in the
// architecture's struct pt_regs as the kernel's uapi headers define it: the
// context a uprobe BPF program receives. The tables are proved against the
// headers by compiling offsetof() with each cross compiler
// (TestRegisterOffsets). Aliases share their register's slot ("eax", "ax"
// and "al" are rax's); the argument's size, not the alias, says how many
// bytes count (gdb PR24541).
//
// The i386 table is the 32-bit pt_regs of an i386 kernel. A 32-bit process
// on an x86-64 kernel is seen through the 64-bit pt_regs: an attacher on
// such a kernel maps each register with I386ToX8664. The same holds for
// 32-bit arm processes on an arm64 kernel, which argspec does not
// translate.
//
// # Degrading per argument
//
// libbpf fails a whole probe on one operand it cannot handle
// (libbpf/libbpf#559, #796; iovisor/bcc#3880). Here a well-formed operand
// that a BPF program cannot read is an Arg of kind Unsupported and the
// other arguments of the probe decode normally: SIMD and FP registers
// (%xmm0, v0: pt_regs holds no vector state), relocation operators
// (#:lo12:sym, %lo(sym), sym@GOT), segment-relative TLS addresses, absolute
// addresses without a base register, register names the architecture does
// not have (x31, x32), 64-bit values in i386 register pairs, and ppc's
// "0(0)" (RA=0 reads as the value 0). An Unsupported operand is not
// validated past the point where it was recognised.
//
// Only a malformed string is an error: a *SyntaxError with the argument
// number, the column and what was expected. That covers sizes other than
// 1, 2, 4 and 8 (as libbpf, although a struct passed by value can have
// another: bpftrace/bpftrace#3798), a missing size ("%rdi"; bcc guessed the
// register width), "+4@", empty operands, unbalanced brackets, numbers
// beyond 64 bits and more than MaxArgs (12) arguments. An empty or
// all-whitespace string means no arguments: nil, nil.
//
// Constants are 64-bit two's complement, as in the assembler:
// "8@$18446744073709551614" is -2. Hardwired zero registers (arm64 xzr,
// riscv zero/x0, loongarch $r0) are the constant 0: on riscv the slot x0
// would have holds the pc, and on arm64 register number 31 is sp.
//
// # Canonical form
//
// Arg.String and Format write arguments back in one canonical spelling per
// architecture (decimal numbers, no optional whitespace, x86 SIB always
// with its scale, "sym+8(%rip)" for "8+sym(%rip)"). Parse(Format(args))
// returns args again, except that each Operand becomes the canonical text;
// Unsupported arguments keep their operand as written and come back
// identical. FuzzParse checks this on every architecture.
//
// # Cost
//
// The tokenizer is hand-written (no regexp) and always advances, so it
// terminates on any input (bcc looped forever on operands it did not
// understand: iovisor/bcc#3649, #3861). Parse allocates once per call, the
// result slice sized by a first pass that counts the arguments; register
// names and symbols are substrings of the input.
package argspec
