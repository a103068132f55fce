package unwind

import (
	"debug/elf"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/probekit/probekit/internal/test/elftest"
)

// TestUnwindArm64 walks a real arm64 stack: testdata/arm64_chain.c,
// built by the cross compiler and run by qemu-aarch64 in user mode,
// writes the registers a uprobe at probe_point's entry would see (x30
// still holding the return address) and the stack above them. The walk
// through the fixture's .eh_frame must name the chain the program took,
// down to _start, whose CFI marks x30 undefined.
func TestUnwindArm64(t *testing.T) {
	cc, qemu := "aarch64-linux-gnu-gcc", "qemu-aarch64-static"
	for _, tool := range []string{cc, qemu} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s (make deps installs it): %v", tool, err)
		}
	}
	// pac-ret signs return addresses before they are stored (the CFI
	// says so with DW_CFA_AARCH64_negate_ra_state); qemu's default
	// user-mode CPU authenticates them.
	for _, v := range []struct{ name, flag string }{{"plain", ""}, {"pac-ret", "-mbranch-protection=standard"}} {
		t.Run(v.name, func(t *testing.T) {
			bin := filepath.Join(t.TempDir(), "arm64_chain")
			args := []string{"-static", "-O2", "-g0", "-fomit-frame-pointer", "-fno-inline", "-fno-optimize-sibling-calls"}
			if v.flag != "" {
				args = append(args, v.flag)
			}
			build := exec.Command(cc, append(args, "-o", bin, filepath.Join("testdata", "arm64_chain.c"))...)
			if out, err := build.CombinedOutput(); err != nil {
				t.Fatalf("%s: %v\n%s", build, err, out)
			}
			out, err := exec.Command(qemu, bin).Output()
			if err != nil {
				t.Fatalf("%s %s: %v", qemu, bin, err)
			}
			if len(out) < 40 {
				t.Fatalf("fixture wrote %d bytes", len(out))
			}
			le := binary.LittleEndian
			s := Sample{IP: le.Uint64(out), SP: le.Uint64(out[8:]), BP: le.Uint64(out[16:]), LR: le.Uint64(out[24:]), Machine: elf.EM_AARCH64}
			if n := le.Uint64(out[32:]); n != uint64(len(out)-40) {
				t.Fatalf("stack of %d bytes announced, %d written", n, len(out)-40)
			}
			s.Stack = StackCopy{Addr: s.SP, Data: out[40:]}

			f := elftest.Open(t, bin)
			tab, err := Load(f)
			if err != nil {
				t.Fatal(err)
			}
			if tab.Machine != elf.EM_AARCH64 {
				t.Fatalf("table for %v", tab.Machine)
			}
			// A static non-PIE executable runs at its link-time addresses.
			res := s.Unwind(objects{{0x400000, 0x1000000, 0, tab}})
			names := funcNames(t, bin, res.Frames)
			want := []string{"probe_point", "chain_c", "chain_b", "chain_a", "main", "__libc_start_call_main", "__libc_start_main_impl", "_start"}
			if !slices.Equal(names, want) || res.Stop != StopOutermost || res.ByFramePointer != 0 {
				t.Errorf("frames %s (%#x), stop %v (%v), %d by frame pointer; want %s, outermost, 0",
					strings.Join(names, " "), res.Frames, res.Stop, res.Err, res.ByFramePointer, strings.Join(want, " "))
			}
			if v.flag != "" && signed(s.Stack.Data, res.Frames) == 0 {
				t.Error("no return address on the stack is signed: the pac-ret build did not sign")
			}
		})
	}

	if _, err := ParseMachine(elf.EM_386, nil, 0, false, binary.LittleEndian); err == nil {
		t.Error("ParseMachine(EM_386) accepted")
	}
	if r := UnwindMachine(elf.EM_RISCV, Regs{}, StackCopy{}, objects{}); r.Stop != StopUnsupported {
		t.Errorf("UnwindMachine(EM_RISCV): stop %v", r.Stop)
	}
}

// signed counts the stack words that are one of frames with bits above
// the 48-bit address space set: return addresses stored signed.
func signed(stack []byte, frames []uint64) int {
	n := 0
	for i := 0; i+8 <= len(stack); i += 8 {
		w := binary.LittleEndian.Uint64(stack[i:])
		if w>>48 != 0 && slices.Contains(frames, w&(1<<48-1)) {
			n++
		}
	}
	return n
}

// funcNames names each frame by the function symbol holding it: the
// first frame at its address, the others at the return address minus 4
// (the bl instruction).
func funcNames(t *testing.T, path string, frames []uint64) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ef, err := elf.NewFile(f)
	if err != nil {
		t.Fatal(err)
	}
	syms, err := ef.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for i, pc := range frames {
		if i > 0 {
			pc -= 4
		}
		name := "??"
		for _, s := range syms {
			if elf.ST_TYPE(s.Info) == elf.STT_FUNC && pc >= s.Value && pc < s.Value+s.Size {
				name = s.Name
				break
			}
		}
		names = append(names, name)
	}
	return names
}
