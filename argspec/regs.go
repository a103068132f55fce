package argspec

// Register tables: every general-purpose register name a compiler writes
// into a USDT operand, mapped to the byte offset of the register's slot in
// the structure a uprobe BPF program receives as its context, as the
// kernel's uapi headers define it (asm/ptrace.h of each architecture). Aliases of one
// register (x86 rax/eax/ax/al, arm64 x0/w0, riscv s0/fp/x8) share a slot:
// the argument's size, not the alias, says how many bytes are meaningful
// (gdb PR24541), and every architecture here except the big-endian ones
// keeps the low bytes first; the BPF side reads the whole slot and
// truncates, so endianness does not matter for registers.
//
// TestRegisterOffsets compiles offsetof() of every slot with each
// architecture's (cross) compiler and compares it with these tables.

// x8664Regs is the x86-64 struct pt_regs of
// arch/x86/include/uapi/asm/ptrace.h (the !__i386__ branch): fifteen
// general-purpose registers, orig_rax, rip, cs, eflags, rsp, ss, 8 bytes
// each.
var x8664Regs = map[string]uint16{
	"r15": 0, "r15d": 0, "r15w": 0, "r15b": 0,
	"r14": 8, "r14d": 8, "r14w": 8, "r14b": 8,
	"r13": 16, "r13d": 16, "r13w": 16, "r13b": 16,
	"r12": 24, "r12d": 24, "r12w": 24, "r12b": 24,
	"rbp": 32, "ebp": 32, "bp": 32, "bpl": 32,
	"rbx": 40, "ebx": 40, "bx": 40, "bl": 40,
	"r11": 48, "r11d": 48, "r11w": 48, "r11b": 48,
	"r10": 56, "r10d": 56, "r10w": 56, "r10b": 56,
	"r9": 64, "r9d": 64, "r9w": 64, "r9b": 64,
	"r8": 72, "r8d": 72, "r8w": 72, "r8b": 72,
	"rax": 80, "eax": 80, "ax": 80, "al": 80,
	"rcx": 88, "ecx": 88, "cx": 88, "cl": 88,
	"rdx": 96, "edx": 96, "dx": 96, "dl": 96,
	"rsi": 104, "esi": 104, "si": 104, "sil": 104,
	"rdi": 112, "edi": 112, "di": 112, "dil": 112,
	"rip": 128, "eip": 128,
	"rsp": 152, "esp": 152, "sp": 152, "spl": 152,
}

// i386Regs is the 32-bit struct pt_regs of the same header (__i386__
// branch): ebx ecx edx esi edi ebp eax xds xes xfs xgs orig_eax eip xcs
// eflags esp xss, 4 bytes each. It is the layout an i386 kernel hands a
// uprobe program. A 32-bit process on an x86-64 kernel is seen through the
// 64-bit pt_regs instead: see I386ToX8664. sil/dil/bpl/spl need a REX
// prefix and do not exist in 32-bit code, so they are absent here.
var i386Regs = map[string]uint16{
	"ebx": 0, "bx": 0, "bl": 0,
	"ecx": 4, "cx": 4, "cl": 4,
	"edx": 8, "dx": 8, "dl": 8,
	"esi": 12, "si": 12,
	"edi": 16, "di": 16,
	"ebp": 20, "bp": 20,
	"eax": 24, "ax": 24, "al": 24,
	"esp": 60, "sp": 60,
}

// arm64Regs is struct user_pt_regs of arch/arm64/include/uapi/asm/ptrace.h
// {regs[31], sp, pc, pstate}, which the kernel's struct pt_regs begins
// with. There is no x31: register number 31 is sp or the zero register
// depending on the instruction, and reading regs[31] overran the array
// (iovisor/bcc#2790), so "x31" is left unknown.
var arm64Regs = map[string]uint16{
	"x0": 0, "w0": 0, "x1": 8, "w1": 8, "x2": 16, "w2": 16, "x3": 24, "w3": 24,
	"x4": 32, "w4": 32, "x5": 40, "w5": 40, "x6": 48, "w6": 48, "x7": 56, "w7": 56,
	"x8": 64, "w8": 64, "x9": 72, "w9": 72, "x10": 80, "w10": 80, "x11": 88, "w11": 88,
	"x12": 96, "w12": 96, "x13": 104, "w13": 104, "x14": 112, "w14": 112, "x15": 120, "w15": 120,
	"x16": 128, "w16": 128, "x17": 136, "w17": 136, "x18": 144, "w18": 144, "x19": 152, "w19": 152,
	"x20": 160, "w20": 160, "x21": 168, "w21": 168, "x22": 176, "w22": 176, "x23": 184, "w23": 184,
	"x24": 192, "w24": 192, "x25": 200, "w25": 200, "x26": 208, "w26": 208, "x27": 216, "w27": 216,
	"x28": 224, "w28": 224, "x29": 232, "w29": 232, "fp": 232,
	"x30": 240, "w30": 240, "lr": 240,
	"sp": 248, "wsp": 248,
	"pc": 256,
}

// armRegs is struct pt_regs {long uregs[18]} of
// arch/arm/include/uapi/asm/ptrace.h, 4-byte slots; gcc prints r10 as
// "sl", r11 as "fp" and r12 as "ip" (its REGISTER_NAMES).
var armRegs = map[string]uint16{
	"r0": 0, "r1": 4, "r2": 8, "r3": 12, "r4": 16, "r5": 20, "r6": 24, "r7": 28,
	"r8": 32, "r9": 36, "sb": 36,
	"r10": 40, "sl": 40,
	"r11": 44, "fp": 44,
	"r12": 48, "ip": 48,
	"r13": 52, "sp": 52,
	"r14": 56, "lr": 56,
	"r15": 60, "pc": 60,
}

// s390xRegs is user_pt_regs of arch/s390/include/uapi/asm/ptrace.h
// {args[1], psw_t psw (mask, addr), gprs[16]}: gprs start at 24.
var s390xRegs = map[string]uint16{
	"r0": 24, "r1": 32, "r2": 40, "r3": 48, "r4": 56, "r5": 64, "r6": 72, "r7": 80,
	"r8": 88, "r9": 96, "r10": 104, "r11": 112, "r12": 120, "r13": 128, "r14": 136, "r15": 144,
}

// riscv64Regs is struct user_regs_struct of
// arch/riscv/include/uapi/asm/ptrace.h {pc, ra, sp, gp, tp, t0-t2, s0, s1,
// a0-a7, s2-s11, t3-t6}, 8 bytes each: xN sits at 8*N because pc takes the
// slot x0 would have. x0/zero is therefore not here (its slot is the pc):
// it reads as the constant 0 (see riscv64Zero).
var riscv64Regs = map[string]uint16{
	"pc": 0,
	"x1": 8, "ra": 8, "x2": 16, "sp": 16, "x3": 24, "gp": 24, "x4": 32, "tp": 32,
	"x5": 40, "t0": 40, "x6": 48, "t1": 48, "x7": 56, "t2": 56,
	"x8": 64, "s0": 64, "fp": 64, "x9": 72, "s1": 72,
	"x10": 80, "a0": 80, "x11": 88, "a1": 88, "x12": 96, "a2": 96, "x13": 104, "a3": 104,
	"x14": 112, "a4": 112, "x15": 120, "a5": 120, "x16": 128, "a6": 128, "x17": 136, "a7": 136,
	"x18": 144, "s2": 144, "x19": 152, "s3": 152, "x20": 160, "s4": 160, "x21": 168, "s5": 168,
	"x22": 176, "s6": 176, "x23": 184, "s7": 184, "x24": 192, "s8": 192, "x25": 200, "s9": 200,
	"x26": 208, "s10": 208, "x27": 216, "s11": 216,
	"x28": 224, "t3": 224, "x29": 232, "t4": 232, "x30": 240, "t5": 240, "x31": 248, "t6": 248,
}

// ppc64Regs is struct pt_regs of arch/powerpc/include/uapi/asm/ptrace.h,
// which begins with unsigned long gpr[32]. The note writes a register as a
// bare number ("8@3" is r3) or with -mregnames as "%r3"; both map to the
// names here.
var ppc64Regs = map[string]uint16{
	"r0": 0, "r1": 8, "r2": 16, "r3": 24, "r4": 32, "r5": 40, "r6": 48, "r7": 56,
	"r8": 64, "r9": 72, "r10": 80, "r11": 88, "r12": 96, "r13": 104, "r14": 112, "r15": 120,
	"r16": 128, "r17": 136, "r18": 144, "r19": 152, "r20": 160, "r21": 168, "r22": 176, "r23": 184,
	"r24": 192, "r25": 200, "r26": 208, "r27": 216, "r28": 224, "r29": 232, "r30": 240, "r31": 248,
}

// ppc64Names turns a bare register number into its table name without
// allocating.
var ppc64Names = [32]string{
	"r0", "r1", "r2", "r3", "r4", "r5", "r6", "r7", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15",
	"r16", "r17", "r18", "r19", "r20", "r21", "r22", "r23", "r24", "r25", "r26", "r27", "r28", "r29", "r30", "r31",
}

// loong64Regs is struct pt_regs of arch/loongarch/include/asm/ptrace.h
// (and user_pt_regs of its uapi header), which begin with unsigned long
// regs[32]: $rN sits at 8*N, ABI names per the LoongArch ELF psABI (ra r1,
// tp r2, sp r3, a0-a7 r4-r11, t0-t8 r12-r20, fp/s9 r22, s0-s8 r23-r31).
// Debian ships no loongarch64 cross compiler, so TestRegisterOffsets cannot
// check this table against a compiler; it rests on the header's
// declaration order. r0 is the zero register (loong64Zero).
var loong64Regs = map[string]uint16{
	"r1": 8, "ra": 8, "r2": 16, "tp": 16, "r3": 24, "sp": 24,
	"r4": 32, "a0": 32, "r5": 40, "a1": 40, "r6": 48, "a2": 48, "r7": 56, "a3": 56,
	"r8": 64, "a4": 64, "r9": 72, "a5": 72, "r10": 80, "a6": 80, "r11": 88, "a7": 88,
	"r12": 96, "t0": 96, "r13": 104, "t1": 104, "r14": 112, "t2": 112, "r15": 120, "t3": 120,
	"r16": 128, "t4": 128, "r17": 136, "t5": 136, "r18": 144, "t6": 144, "r19": 152, "t7": 152,
	"r20": 160, "t8": 160, "r21": 168,
	"r22": 176, "fp": 176, "s9": 176,
	"r23": 184, "s0": 184, "r24": 192, "s1": 192, "r25": 200, "s2": 200, "r26": 208, "s3": 208,
	"r27": 216, "s4": 216, "r28": 224, "s5": 224, "r29": 232, "s6": 232, "r30": 240, "s7": 240,
	"r31": 248, "s8": 248,
}

// Hardwired zero registers: an operand naming one is the constant 0. On
// arm64 number 31 is sp in a base position, and on riscv the x0 slot holds
// the pc, so reading a slot would be wrong there.
var (
	arm64Zero   = []string{"xzr", "wzr"}
	riscv64Zero = []string{"zero", "x0"}
	loong64Zero = []string{"zero", "r0"}
)
