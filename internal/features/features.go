// Package features probes, once per process, the kernel features USDT
// attachment depends on, and lets tests force each one off to exercise
// the fallbacks. A forced-off feature changes probekit's decisions, not
// the kernel: the fallback code runs for real on this kernel.
package features

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	ciliumfeatures "github.com/cilium/ebpf/features"
	"golang.org/x/sys/unix"
)

// Feature names a kernel capability.
type Feature int

const (
	// Cookie is bpf_get_attach_cookie for uprobes (Linux 5.15,
	// 7adfc6c9b315): the spec id travels with the attachment, no IP map.
	Cookie Feature = iota
	// RefCtr is uprobe ref_ctr_offset (Linux 4.20, 1cc33161a83d): the
	// kernel raises and lowers USDT semaphores.
	RefCtr
	// UprobeMulti is the uprobe_multi link (Linux 6.6) including the
	// PID-filter fix (46ba0e49b642); without the fix the link filters by
	// thread, not process, so probekit does not use it.
	UprobeMulti
	// UprobeSyscall is the uprobe syscall behind the kernel's optimized
	// nop5 uprobes (56101b69c919, Linux 6.18). Informational: probekit plants its
	// probes on the NOP the note names and never relies on it.
	UprobeSyscall
	// EntryCaller: at a uprobe on a function's first instruction when it
	// is push %rbp (or endbr64), the kernel's user stack walk
	// (bpf_get_stack, bpf_get_stackid) puts the caller, the return
	// address at rsp, second itself (x86-64). Debian's 5.10 does not;
	// its 6.1 and 6.12 do (measured with probeEntryCaller).
	EntryCaller
	// SleepableUprobe is a uprobe program loaded sleepable
	// (BPF_F_SLEEPABLE, Linux 6.0: 8c7dcb84e3b7, 64ad7556c75e), which may
	// call bpf_copy_from_user (5.10, 07be4c4a3e7a): a read of user memory
	// that faults the page in, where bpf_probe_read_user fails on a page
	// the process has not touched yet.
	SleepableUprobe
	numFeatures
)

var names = [numFeatures]string{
	Cookie:          "BPF cookie (Linux 5.15)",
	RefCtr:          "uprobe ref_ctr_offset (Linux 4.20)",
	UprobeMulti:     "uprobe_multi link with PID filter fix (Linux 6.6+)",
	UprobeSyscall:   "uprobe syscall (Linux 6.18)",
	EntryCaller:     "the caller in user stacks at a function's entry",
	SleepableUprobe: "sleepable uprobe programs (Linux 6.0)",
}

// since is each feature's first mainline release.
var since = [numFeatures]string{
	Cookie:          "5.15",
	RefCtr:          "4.20",
	UprobeMulti:     "6.6",
	UprobeSyscall:   "6.18",
	EntryCaller:     "",
	SleepableUprobe: "6.0",
}

// Since is the first Linux release with f ("5.15"), for tests that skip
// on older kernels only.
func (f Feature) Since() string {
	if f >= 0 && f < numFeatures {
		return since[f]
	}
	return ""
}

func (f Feature) String() string {
	if f >= 0 && f < numFeatures {
		return names[f]
	}
	return fmt.Sprintf("feature(%d)", int(f))
}

var probes = [numFeatures]func() (bool, error){
	Cookie:          sync.OnceValues(probeCookie),
	RefCtr:          sync.OnceValues(probeRefCtr),
	UprobeMulti:     sync.OnceValues(probeUprobeMulti),
	UprobeSyscall:   sync.OnceValues(probeUprobeSyscall),
	EntryCaller:     sync.OnceValues(probeEntryCaller),
	SleepableUprobe: sync.OnceValues(probeSleepableUprobe),
}

// forced counts, per feature, the ForceOff calls not yet restored.
var forced [numFeatures]atomic.Int32

// Have reports whether the kernel has f. A probe that fails for another
// reason than absence (no privileges) returns its error.
func Have(f Feature) (bool, error) {
	if f < 0 || f >= numFeatures {
		return false, fmt.Errorf("unknown feature %d", int(f))
	}
	if forced[f].Load() > 0 {
		return false, nil
	}
	return probes[f]()
}

// Check returns nil if the kernel has f, an error wrapping
// ebpf.ErrNotSupported that names f and its first release if not, and
// the probe's own error if the probe failed for another reason. It is
// the one place that words a missing feature; callers add what needed it.
func Check(f Feature) error {
	ok, err := Have(f)
	switch {
	case err != nil:
		return fmt.Errorf("probe %s: %w", f, err)
	case ok:
		return nil
	case Forced(f):
		return fmt.Errorf("%w: %s (forced off)", ebpf.ErrNotSupported, f)
	default:
		return fmt.Errorf("%w: %s", ebpf.ErrNotSupported, f)
	}
}

// ForceOff makes Have(f) report false until the returned function is
// called. Calls nest, and each restore counts once. For tests of the
// fallbacks; it affects the whole process, so tests that force a feature
// off must not run in parallel with others that depend on it.
func ForceOff(f Feature) (restore func()) {
	forced[f].Add(1)
	var once sync.Once
	return func() { once.Do(func() { forced[f].Add(-1) }) }
}

// Forced reports whether f is forced off (ForceOff).
func Forced(f Feature) bool { return forced[f].Load() > 0 }

func probeCookie() (bool, error) {
	err := ciliumfeatures.HaveProgramHelper(ebpf.Kprobe, asm.FnGetAttachCookie)
	return supported(err)
}

// RefCtrFormat exists when the uprobe PMU takes a reference counter
// offset (Linux 4.20, commits 1cc33161a83d and a6ca88b241d5); it reads
// "config:32-63".
const RefCtrFormat = "/sys/bus/event_source/devices/uprobe/format/ref_ctr_offset"

func probeRefCtr() (bool, error) {
	_, err := os.Stat(RefCtrFormat)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	}
	return false, err
}

// probeUprobeMulti asks for a uprobe_multi link on "/" with pid -1. A
// kernel without uprobe_multi refuses the attach type (EINVAL from the
// program load or the link); one with it but without the PID-filter fix
// gets as far as opening the path (EBADF); one with the fix rejects the
// pid first (EINVAL) — the same test libbpf uses.
func probeUprobeMulti() (bool, error) {
	if err := ciliumfeatures.HaveBPFLinkUprobeMulti(); err != nil {
		return supported(err)
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:       ebpf.Kprobe,
		AttachType: ebpf.AttachTraceUprobeMulti,
		License:    "GPL",
		Instructions: asm.Instructions{
			asm.Mov.Imm(asm.R0, 0),
			asm.Return(),
		},
	})
	if err != nil {
		return false, err
	}
	defer prog.Close()

	errno := uprobeMultiOnRoot(prog.FD(), -1)
	if errno == 0 {
		return false, errors.New("uprobe_multi probe: unexpected success on path /")
	}
	return errno == unix.EINVAL, nil
}

// uprobeMultiOnRoot asks for a uprobe_multi link of prog at offset 0 of
// "/", which can never succeed: the kernel checks the program's attach
// type, then the flags and the pid, then that the path is a regular file
// (kernel/trace/bpf_trace.c, bpf_uprobe_multi_link_attach), so the errno
// tells how far it got.
func uprobeMultiOnRoot(progFD int, pid int32) unix.Errno {
	path := []byte("/\x00")
	offset := uint64(0)
	// union bpf_attr for BPF_LINK_CREATE with uprobe_multi (uapi
	// linux/bpf.h): prog_fd 0, target_fd 4, attach_type 8, flags 12,
	// then path 16, offsets 24, ref_ctr_offsets 32, cookies 40, cnt 48,
	// flags 52, pid 56.
	var attr [64]byte
	ne := func(off int, v uint64, size int) {
		switch size {
		case 4:
			*(*uint32)(unsafe.Pointer(&attr[off])) = uint32(v)
		case 8:
			*(*uint64)(unsafe.Pointer(&attr[off])) = v
		}
	}
	ne(0, uint64(progFD), 4)
	ne(8, uint64(ebpf.AttachTraceUprobeMulti), 4)
	ne(16, uint64(uintptr(unsafe.Pointer(&path[0]))), 8)
	ne(24, uint64(uintptr(unsafe.Pointer(&offset))), 8)
	ne(48, 1, 4)
	ne(56, uint64(uint32(pid)), 4)
	fd, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_LINK_CREATE, uintptr(unsafe.Pointer(&attr[0])), unsafe.Sizeof(attr))
	runtime.KeepAlive(path)
	runtime.KeepAlive(&offset)
	if errno == 0 {
		unix.Close(int(fd))
	}
	return errno
}

// LoadedForUprobeMulti reports whether prog was loaded with the
// uprobe_multi attach type, which no program info field tells: a
// uprobe_multi link request on "/" fails with EBADF (not a regular file)
// for such a program and with EINVAL for any other. Nothing is attached.
// On a kernel without uprobe_multi the answer is always false.
func LoadedForUprobeMulti(progFD int) bool {
	return uprobeMultiOnRoot(progFD, 0) == unix.EBADF
}

// probeUprobeSyscall calls the uprobe syscall outside a trampoline: a
// kernel with it answers ENXIO, one without ENOSYS.
func probeUprobeSyscall() (bool, error) {
	const sysUprobe = 336 // x86-64 only (arch/x86/entry/syscalls)
	if runtime.GOARCH != "amd64" {
		return false, nil
	}
	_, _, errno := unix.Syscall(sysUprobe, 0, 0, 0)
	return errno == unix.ENXIO, nil
}

// probeSleepableUprobe loads a sleepable kprobe-type program that calls
// bpf_copy_from_user. Before 6.0 the verifier refuses a sleepable program
// of that type (EINVAL: only tracing, LSM and iterator programs could
// sleep); from 6.0 it loads, and the kernel lets it attach to uprobes
// only (perf_event_set_bpf_prog, bpf_uprobe_multi_link_attach).
func probeSleepableUprobe() (bool, error) {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:    ebpf.Kprobe,
		Flags:   unix.BPF_F_SLEEPABLE,
		License: "GPL",
		Instructions: asm.Instructions{
			// bpf_copy_from_user(fp - 8, 1, NULL)
			asm.Mov.Reg(asm.R1, asm.RFP),
			asm.Add.Imm(asm.R1, -8),
			asm.Mov.Imm(asm.R2, 1),
			asm.Mov.Imm(asm.R3, 0),
			asm.FnCopyFromUser.Call(),
			asm.Mov.Imm(asm.R0, 0),
			asm.Return(),
		},
	})
	switch {
	case err == nil:
		prog.Close()
		return true, nil
	case errors.Is(err, unix.EINVAL), errors.Is(err, ebpf.ErrNotSupported):
		return false, nil
	}
	return false, err
}

func supported(err error) (bool, error) {
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, ebpf.ErrNotSupported):
		return false, nil
	default:
		return false, err
	}
}
