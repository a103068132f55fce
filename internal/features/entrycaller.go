package features

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"reflect"
	"runtime"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/probekit/probekit/procmaps"
	"golang.org/x/arch/x86/x86asm"
	"golang.org/x/sys/unix"
)

// probeEntryCaller fires a uprobe on a push %rbp that begins a function
// of this process (entryCallerTarget, after Go's stack check) and asks
// bpf_get_stack for the user stack there: when the kernel put the
// return address at rsp second, after the instruction pointer, it adds
// the caller itself (x86-64 only; elsewhere false).
func probeEntryCaller() (bool, error) {
	if runtime.GOARCH != "amd64" {
		return false, nil
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	off, err := pushRBPOffset(reflect.ValueOf(entryCallerTarget).Pointer())
	if err != nil {
		return false, fmt.Errorf("entry caller probe: %w", err)
	}
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 48, MaxEntries: 1})
	if err != nil {
		return false, err
	}
	defer m.Close()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.Kprobe, License: "GPL", Instructions: entryCallerProgram(m.FD())})
	if err != nil {
		return false, err
	}
	defer prog.Close()
	ex, err := link.OpenExecutable("/proc/self/exe")
	if err != nil {
		return false, err
	}
	l, err := ex.Uprobe("", prog, &link.UprobeOptions{Address: off, PID: unix.Gettid()})
	if err != nil {
		return false, err
	}
	entryCallerTarget(1)
	// Detaching waits for the kernel's RCU grace periods (about 60 ms of
	// the probe's 64 measured on this VM, in the start of every trace):
	// the answer is in the map already, so the link goes in the
	// background (it holds its own reference to the program).
	go l.Close()
	var v [48]byte
	if err := m.Lookup(uint32(0), v[:]); err != nil {
		return false, err
	}
	n, ret := binary.NativeEndian.Uint64(v[:]), binary.NativeEndian.Uint64(v[8:])
	if n < 16 || ret == 0 {
		return false, fmt.Errorf("entry caller probe: the uprobe did not fire (%d bytes of stack, return address %#x)", n, ret)
	}
	return binary.NativeEndian.Uint64(v[24:]) == ret, nil
}

// entryCallerProgram stores, at key 0 of the array map fd, the bytes
// bpf_get_stack wrote (of 4 frames), the return address at rsp, then the
// 4 frames.
func entryCallerProgram(fd int) asm.Instructions {
	return asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		// The frames at fp-32.
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -32),
		asm.Mov.Imm(asm.R3, 32),
		asm.Mov.Imm(asm.R4, 256), // BPF_F_USER_STACK
		asm.FnGetStack.Call(),
		asm.StoreMem(asm.RFP, -48, asm.R0, asm.DWord),
		// The return address at rsp (struct pt_regs: rsp at 152) at fp-40.
		asm.Mov.Reg(asm.R1, asm.RFP),
		asm.Add.Imm(asm.R1, -40),
		asm.Mov.Imm(asm.R2, 8),
		asm.LoadMem(asm.R3, asm.R6, 152, asm.DWord),
		asm.FnProbeReadUser.Call(),
		asm.StoreImm(asm.RFP, -56, 0, asm.Word),
		asm.LoadMapPtr(asm.R1, fd),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -56),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, -48),
		asm.Mov.Imm(asm.R4, 0),
		asm.FnMapUpdateElem.Call(),
		asm.Mov.Imm(asm.R0, 0),
		asm.Return(),
	}
}

// entryCallerTarget has a frame (it calls), so after its stack check
// it pushes rbp.
//
//go:noinline
func entryCallerTarget(n int) int { return entryCallerLeaf(n) + 1 }

//go:noinline
func entryCallerLeaf(n int) int { return n * 3 }

// pushRBPOffset returns the file offset of the first push %rbp in the
// function at pc of this executable (within its first 64 bytes).
func pushRBPOffset(pc uintptr) (uint64, error) {
	off, err := fileOffset(uint64(pc))
	if err != nil {
		return 0, err
	}
	exe, err := os.Open("/proc/self/exe")
	if err != nil {
		return 0, err
	}
	defer exe.Close()
	code := make([]byte, 64)
	if _, err := exe.ReadAt(code, int64(off)); err != nil {
		return 0, err
	}
	for i := 0; i < len(code); {
		in, err := x86asm.Decode(code[i:], 64)
		if err != nil {
			return 0, err
		}
		if in.Op == x86asm.PUSH && in.Args[0] == x86asm.RBP {
			return off + uint64(i), nil
		}
		i += in.Len
	}
	return 0, errors.New("no push %rbp at the start of the target")
}

// fileOffset returns the offset in this executable's file of the code at
// addr (/proc/self/maps).
func fileOffset(addr uint64) (uint64, error) {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	maps, _, err := procmaps.ParseMaps(f)
	if err != nil {
		return 0, err
	}
	for _, m := range maps {
		if m.Start <= addr && addr < m.End && m.Perms&procmaps.Exec != 0 {
			return addr - m.Start + m.Offset, nil
		}
	}
	return 0, fmt.Errorf("no executable mapping holds %#x", addr)
}
