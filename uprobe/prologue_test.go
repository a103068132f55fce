package uprobe

import (
	"debug/elf"
	"strings"
	"testing"

	"github.com/probekit/probekit/internal/test/testkit"
)

// objdumpPrologues returns, per function start address, where its
// stack-bound check ends as read from objdump's text: after the JBE (B.LS)
// that follows a compare with 16(R14) (a load of [X28, #16]) within the
// first maxPrologue instructions; 0 for a function without one.
func objdumpPrologues(tb testing.TB, tool, path string, arm64 bool) map[uint64]uint64 {
	tb.Helper()
	type line struct {
		addr uint64
		text string
	}
	funcs := map[uint64][]line{}
	var cur uint64
	walkObjdump(objdump(tb, tool, path),
		func(start uint64) { cur = start; funcs[cur] = nil },
		func(addr uint64, text string) {
			if cur != 0 {
				funcs[cur] = append(funcs[cur], line{addr, text})
			}
		})
	ends := map[uint64]uint64{}
	for start, lines := range funcs {
		ends[start] = 0
		checked := false
		for i := 0; i < len(lines) && i < maxPrologue; i++ {
			t := lines[i].text
			switch {
			case !arm64 && strings.HasPrefix(t, "cmp") && strings.Contains(t, "0x10(%r14)"):
				checked = true
			case arm64 && i == 0 && strings.HasPrefix(t, "ldr") && strings.Contains(t, "[x28, #16]"):
				checked = true
			case checked && (strings.HasPrefix(t, "jbe") || strings.HasPrefix(t, "b.ls")):
				if i+1 < len(lines) {
					ends[start] = lines[i+1].addr - start
				}
			default:
				continue
			}
			if ends[start] != 0 {
				break
			}
		}
	}
	return ends
}

// For every function of the Go fixture, the decoder finds the end of the
// stack check exactly where objdump shows it, and nothing where there is
// none.
func TestGoStackCheckEndObjdump(t *testing.T) {
	for _, c := range []struct {
		path, tool string
		arm64      bool
	}{
		{goprog, "objdump", false},
		{testkit.Fixture("goprog_arm64"), "aarch64-linux-gnu-objdump", true},
	} {
		want := objdumpPrologues(t, c.tool, c.path, c.arm64)
		b := mustOpen(t, c.path)
		checked, found := 0, 0
		for _, fn := range b.Functions("*") {
			w, ok := want[fn.Address]
			if !ok || fn.Size == 0 {
				continue
			}
			code, err := b.readCode(fn.Offset, min(fn.Size, 64))
			if err != nil {
				t.Fatal(err)
			}
			if got := goStackCheckEnd(b.Machine(), code); got != w {
				t.Errorf("%s %s: stack check ends at %#x, objdump says %#x", c.path, fn.Name, got, w)
			}
			checked++
			if w != 0 {
				found++
			}
		}
		if checked < 1000 || found < 500 {
			t.Errorf("%s: %d functions compared, %d with a stack check: too few", c.path, checked, found)
		}
		t.Logf("%s: %d functions, %d with a stack check", c.path, checked, found)
	}
}

func TestGoStackCheckEndShapes(t *testing.T) {
	for _, c := range []struct {
		name string
		m    elf.Machine
		code []byte
		want uint64
	}{
		// cmp 0x10(%r14),%rsp; jbe +0x20; push %rbp
		{"amd64 small frame", elf.EM_X86_64, []byte{0x49, 0x3b, 0x66, 0x10, 0x76, 0x20, 0x55}, 6},
		// lea -0x398(%rsp),%r12; cmp 0x10(%r14),%r12; jbe rel32; push %rbp
		{"amd64 large frame", elf.EM_X86_64, []byte{0x4c, 0x8d, 0xa4, 0x24, 0x68, 0xfc, 0xff, 0xff, 0x4d, 0x3b, 0x66, 0x10, 0x0f, 0x86, 0xb8, 0x00, 0x00, 0x00, 0x55}, 18},
		// add %rbx,%rax; ret: a leaf without a check
		{"amd64 leaf", elf.EM_X86_64, []byte{0x48, 0x01, 0xd8, 0xc3}, 0},
		// cmp 0x10(%r15),%rsp: not g
		{"amd64 other register", elf.EM_X86_64, []byte{0x49, 0x3b, 0x67, 0x10, 0x76, 0x20}, 0},
		// cmp then a jump that is not jbe
		{"amd64 no jbe", elf.EM_X86_64, []byte{0x49, 0x3b, 0x66, 0x10, 0x75, 0x20}, 0},
		{"amd64 truncated", elf.EM_X86_64, []byte{0x49, 0x3b, 0x66}, 0},
		// ldr x16,[x28,#16]; sub x17,sp,#0x3a0; cmp x17,x16; b.ls
		{"arm64 large frame", elf.EM_AARCH64, []byte{0x90, 0x0b, 0x40, 0xf9, 0xf1, 0x83, 0x0e, 0xd1, 0x3f, 0x02, 0x10, 0xeb, 0xa9, 0x05, 0x00, 0x54}, 16},
		// ldr x16,[x28,#16]; cmp sp,x16; b.ls
		{"arm64 small frame", elf.EM_AARCH64, []byte{0x90, 0x0b, 0x40, 0xf9, 0xff, 0x63, 0x30, 0xeb, 0xa9, 0x05, 0x00, 0x54}, 12},
		// ldr x16,[x28,#16]; subs x17,sp,#0xf90; b.cc; cmp x17,x16; b.ls
		{"arm64 huge frame", elf.EM_AARCH64, []byte{0x90, 0x0b, 0x40, 0xf9, 0xf1, 0x43, 0x3e, 0xf1, 0xa3, 0x05, 0x00, 0x54, 0x3f, 0x02, 0x10, 0xeb, 0x69, 0x05, 0x00, 0x54}, 20},
		// ldr x16,[x27,#16]: not g
		{"arm64 other register", elf.EM_AARCH64, []byte{0x70, 0x0b, 0x40, 0xf9, 0xff, 0x63, 0x30, 0xeb, 0xa9, 0x05, 0x00, 0x54}, 0},
		{"i386", elf.EM_386, []byte{0x49, 0x3b, 0x66, 0x10, 0x76, 0x20}, 0},
	} {
		if got := goStackCheckEnd(c.m, c.code); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}
