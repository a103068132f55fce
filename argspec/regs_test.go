package argspec

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/probekit/probekit/internal/test/testkit"
)

// slot is one pt_regs slot: the C expression naming it in offsetof() and
// every register name the table maps to it.
type slot struct {
	member string
	names  string // space-separated
}

// ptRegsLayouts says, per architecture, which compiler and uapi structure
// define the slots, and which names share each slot.
var ptRegsLayouts = []struct {
	machine elf.Machine
	cc      string
	typ     string // the C type given to offsetof
	regs    map[string]uint16
	slots   []slot
}{
	{elf.EM_X86_64, "gcc", "struct pt_regs", x8664Regs, []slot{
		{"r15", "r15 r15d r15w r15b"}, {"r14", "r14 r14d r14w r14b"},
		{"r13", "r13 r13d r13w r13b"}, {"r12", "r12 r12d r12w r12b"},
		{"rbp", "rbp ebp bp bpl"}, {"rbx", "rbx ebx bx bl"},
		{"r11", "r11 r11d r11w r11b"}, {"r10", "r10 r10d r10w r10b"},
		{"r9", "r9 r9d r9w r9b"}, {"r8", "r8 r8d r8w r8b"},
		{"rax", "rax eax ax al"}, {"rcx", "rcx ecx cx cl"},
		{"rdx", "rdx edx dx dl"}, {"rsi", "rsi esi si sil"},
		{"rdi", "rdi edi di dil"}, {"rip", "rip eip"},
		{"rsp", "rsp esp sp spl"},
	}},
	{elf.EM_386, "i686-linux-gnu-gcc", "struct pt_regs", i386Regs, []slot{
		{"ebx", "ebx bx bl"}, {"ecx", "ecx cx cl"}, {"edx", "edx dx dl"},
		{"esi", "esi si"}, {"edi", "edi di"}, {"ebp", "ebp bp"},
		{"eax", "eax ax al"}, {"esp", "esp sp"},
	}},
	{elf.EM_AARCH64, "aarch64-linux-gnu-gcc", "struct user_pt_regs", arm64Regs, arm64Slots()},
	{elf.EM_ARM, "arm-linux-gnueabihf-gcc", "struct pt_regs", armRegs, []slot{
		{"uregs[0]", "r0"}, {"uregs[1]", "r1"}, {"uregs[2]", "r2"}, {"uregs[3]", "r3"},
		{"uregs[4]", "r4"}, {"uregs[5]", "r5"}, {"uregs[6]", "r6"}, {"uregs[7]", "r7"},
		{"uregs[8]", "r8"}, {"uregs[9]", "r9 sb"}, {"ARM_r10", "r10 sl"},
		{"ARM_fp", "r11 fp"}, {"ARM_ip", "r12 ip"}, {"ARM_sp", "r13 sp"},
		{"ARM_lr", "r14 lr"}, {"ARM_pc", "r15 pc"},
	}},
	{elf.EM_S390, "s390x-linux-gnu-gcc", "user_pt_regs", s390xRegs, numbered("gprs[%d]", "r%d", 16)},
	{elf.EM_RISCV, "riscv64-linux-gnu-gcc", "struct user_regs_struct", riscv64Regs, []slot{
		{"pc", "pc"}, {"ra", "ra x1"}, {"sp", "sp x2"}, {"gp", "gp x3"}, {"tp", "tp x4"},
		{"t0", "t0 x5"}, {"t1", "t1 x6"}, {"t2", "t2 x7"}, {"s0", "s0 fp x8"}, {"s1", "s1 x9"},
		{"a0", "a0 x10"}, {"a1", "a1 x11"}, {"a2", "a2 x12"}, {"a3", "a3 x13"},
		{"a4", "a4 x14"}, {"a5", "a5 x15"}, {"a6", "a6 x16"}, {"a7", "a7 x17"},
		{"s2", "s2 x18"}, {"s3", "s3 x19"}, {"s4", "s4 x20"}, {"s5", "s5 x21"},
		{"s6", "s6 x22"}, {"s7", "s7 x23"}, {"s8", "s8 x24"}, {"s9", "s9 x25"},
		{"s10", "s10 x26"}, {"s11", "s11 x27"},
		{"t3", "t3 x28"}, {"t4", "t4 x29"}, {"t5", "t5 x30"}, {"t6", "t6 x31"},
	}},
	{elf.EM_PPC64, "powerpc64le-linux-gnu-gcc", "struct pt_regs", ppc64Regs, numbered("gpr[%d]", "r%d", 32)},
	// Big-endian ppc64 has the same layout; compiling it too proves the
	// offsets do not depend on the byte order.
	{elf.EM_PPC64, "powerpc64-linux-gnu-gcc", "struct pt_regs", ppc64Regs, numbered("gpr[%d]", "r%d", 32)},
	// loongarch64 is missing: Debian has no loongarch64 cross compiler, so
	// loong64Regs is checked only for consistency (TestLoongArchTable).
}

func arm64Slots() []slot {
	s := numbered("regs[%d]", "x%d", 31)
	for i := range s {
		s[i].names += fmt.Sprintf(" w%d", i)
	}
	s[29].names += " fp"
	s[30].names += " lr"
	return append(s, slot{"sp", "sp wsp"}, slot{"pc", "pc"})
}

func numbered(member, name string, n int) []slot {
	s := make([]slot, n)
	for i := range s {
		s[i] = slot{fmt.Sprintf(member, i), fmt.Sprintf(name, i)}
	}
	return s
}

// TestRegisterOffsets proves the register tables against the kernel's
// uapi headers: each architecture's (cross) compiler computes offsetof()
// of every slot into initialised data of an object file (cross-compiled
// code cannot run here), and the test reads the values back with
// debug/elf in the object's byte order.
func TestRegisterOffsets(t *testing.T) {
	for _, l := range ptRegsLayouts {
		t.Run(l.cc, func(t *testing.T) {
			// Every table name is in exactly one slot, and every slot
			// name is in the table.
			seen := map[string]bool{}
			for _, s := range l.slots {
				for _, n := range strings.Fields(s.names) {
					if seen[n] {
						t.Errorf("%s listed twice", n)
					}
					seen[n] = true
					if _, ok := l.regs[n]; !ok {
						t.Errorf("%s missing from the %v table", n, l.machine)
					}
				}
			}
			for n := range l.regs {
				if !seen[n] {
					t.Errorf("%v table name %s has no slot in this test", l.machine, n)
				}
			}

			if _, err := exec.LookPath(l.cc); err != nil {
				testkit.Unavailable(t, "%s not installed (Debian gcc cross packages): %v", l.cc, err)
			}
			got := compileOffsets(t, l.cc, l.typ, l.slots)
			for i, s := range l.slots {
				for _, n := range strings.Fields(s.names) {
					if l.regs[n] != got[i] {
						t.Errorf("%v %s: table %d, offsetof(%s, %s) = %d", l.machine, n, l.regs[n], l.typ, s.member, got[i])
					}
				}
			}
		})
	}
}

// compileOffsets compiles "const unsigned short off_I = offsetof(typ,
// member)" for every slot and returns the values.
func compileOffsets(t *testing.T, cc, typ string, slots []slot) []uint16 {
	t.Helper()
	var src bytes.Buffer
	src.WriteString("#include <stddef.h>\n#include <asm/ptrace.h>\n")
	for i, s := range slots {
		fmt.Fprintf(&src, "const unsigned short off_%d = offsetof(%s, %s);\n", i, typ, s.member)
	}
	dir := t.TempDir()
	c, obj := filepath.Join(dir, "off.c"), filepath.Join(dir, "off.o")
	if err := os.WriteFile(c, src.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cc, "-c", "-O0", "-o", obj, c).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s\n%s", cc, err, out, src.Bytes())
	}
	f, err := elf.Open(obj)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	vals := make([]uint16, len(slots))
	found := 0
	for _, sym := range syms {
		var i int
		if _, err := fmt.Sscanf(sym.Name, "off_%d", &i); err != nil || i < 0 || i >= len(slots) {
			continue
		}
		if int(sym.Section) >= len(f.Sections) || sym.Size != 2 {
			t.Fatalf("symbol %s: section %d size %d", sym.Name, sym.Section, sym.Size)
		}
		data, err := f.Sections[sym.Section].Data()
		if err != nil {
			t.Fatal(err)
		}
		// In a relocatable object a symbol's value is its offset in its
		// section.
		if sym.Value+2 > uint64(len(data)) {
			t.Fatalf("symbol %s at %d beyond its section", sym.Name, sym.Value)
		}
		vals[i] = f.ByteOrder.Uint16(data[sym.Value:])
		found++
	}
	if found != len(slots) {
		t.Fatalf("found %d of %d offsets in %s", found, len(slots), obj)
	}
	return vals
}

// TestLoongArchTable checks what can be checked without a compiler: $rN
// is at 8*N (pt_regs begins with unsigned long regs[32]) and each ABI name
// sits on the register the psABI gives it.
func TestLoongArchTable(t *testing.T) {
	abi := map[string]int{"ra": 1, "tp": 2, "sp": 3, "fp": 22, "s9": 22}
	for i := 0; i < 8; i++ {
		abi[fmt.Sprintf("a%d", i)] = 4 + i
	}
	for i := 0; i <= 8; i++ {
		abi[fmt.Sprintf("t%d", i)] = 12 + i
		abi[fmt.Sprintf("s%d", i)] = 23 + i
	}
	n := 0
	for i := 1; i < 32; i++ {
		if off, ok := loong64Regs[fmt.Sprintf("r%d", i)]; !ok || off != uint16(8*i) {
			t.Errorf("r%d = %d, %v, want %d", i, off, ok, 8*i)
		}
		n++
	}
	for name, r := range abi {
		if off, ok := loong64Regs[name]; !ok || off != uint16(8*r) {
			t.Errorf("%s = %d, %v, want r%d = %d", name, off, ok, r, 8*r)
		}
		n++
	}
	if n != len(loong64Regs) {
		t.Errorf("table has %d names, checked %d", len(loong64Regs), n)
	}
}
