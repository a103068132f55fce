package procmaps

import (
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"syscall"
)

// EntryStop is a breakpoint that stops a traced process at its
// program's entry point (as LaunchEntry): an int3 written over the first
// byte of the instruction at AT_ENTRY (PTRACE_POKETEXT writes to a
// private copy of the page, as a debugger's breakpoint does), removed
// at the first stop there. For a ptrace tracer: its methods run on the
// tracer thread while the process is stopped. The zero value is
// unarmed.
type EntryStop struct {
	addr  uint64
	orig  [8]byte // the word at addr before the breakpoint
	armed bool
}

// atEntry is auxv's AT_ENTRY (include/uapi/linux/auxvec.h).
const atEntry = 9

// int3 is x86's breakpoint instruction; the trap stops the thread with
// its instruction pointer after it.
const int3 = 0xcc

// Arm plants the breakpoint in pid, stopped right after an execve, and
// reports whether it did. Where it cannot (not x86-64, no AT_ENTRY, a
// breakpoint there already: a uprobe at the entry point), the entry stop
// does not come.
func (e *EntryStop) Arm(pid int) bool {
	*e = EntryStop{}
	if runtime.GOARCH != "amd64" {
		return false
	}
	addr, err := auxvEntry(pid)
	if err != nil || addr == 0 {
		return false
	}
	var w [8]byte
	if n, err := syscall.PtracePeekText(pid, uintptr(addr), w[:]); err != nil || n != len(w) || w[0] == int3 {
		return false
	}
	b := w
	b[0] = int3
	if _, err := syscall.PtracePokeText(pid, uintptr(addr), b[:]); err != nil {
		return false
	}
	*e = EntryStop{addr: addr, orig: w, armed: true}
	return true
}

// Hit reports whether pid's SIGTRAP signal-delivery stop is the
// breakpoint's; it then puts the instruction back and the instruction
// pointer on it, so that the program runs on as if never stopped when
// resumed without the signal.
func (e *EntryStop) Hit(pid int) bool {
	if !e.armed {
		return false
	}
	var regs syscall.PtraceRegs
	if err := syscall.PtraceGetRegs(pid, &regs); err != nil || regs.PC() != e.addr+1 {
		return false
	}
	e.armed = false
	if _, err := syscall.PtracePokeText(pid, uintptr(e.addr), e.orig[:]); err != nil {
		return false
	}
	regs.SetPC(e.addr)
	return syscall.PtraceSetRegs(pid, &regs) == nil
}

// auxvEntry reads AT_ENTRY from pid's auxiliary vector (pairs of 64-bit
// words, ending with AT_NULL).
func auxvEntry(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/auxv", pid))
	if err != nil {
		return 0, err
	}
	for ; len(b) >= 16; b = b[16:] {
		switch binary.NativeEndian.Uint64(b) {
		case 0:
			return 0, nil
		case atEntry:
			return binary.NativeEndian.Uint64(b[8:]), nil
		}
	}
	return 0, nil
}
