// Package unwind walks user stacks of x86-64 and arm64 code built
// without frame pointers, from the call-frame information (CFI) compilers emit for
// exception handling: .eh_frame (or .debug_frame), located by its
// section header or, without section headers, by PT_GNU_EH_FRAME's
// .eh_frame_hdr.
//
// # The approach: copy the stack, unwind in user space
//
// A BPF program (stack.bpf.h's probekit_copy_stack) copies the
// registers rip, rsp and rbp and the top of the user stack, a few
// pages from rsp, into the event it sends; Unwind then steps frames
// in user space with each mapped object's CFI, as perf's
// --call-graph dwarf does with PERF_SAMPLE_STACK_USER. The other
// approach, unwinding inside BPF from tables kept in maps (package
// bpfunwind, which counts stacks in the kernel), costs tables
// per object in kernel memory, built before the hits; copying needs no per-object preparation on the BPF side, so objects
// mapped later (dlopen) need only ProcessObjects.Refresh before their
// hits are unwound; Processes does that for a tracer, per PID, and
// reads a process while it runs (Watch, WatchLaunched: a launched
// command again at its execs and its exit stop, or at its first
// sample), so samples unwound after the process exited still walk.
// Its cost is the copy: up to PROBEKIT_STACK_COPY_SIZE bytes per hit
// through the ring buffer, fewer with probekit_copy_stack_pages.
// Measured on this package's fixture (usdt/bpf's BenchmarkStackHit,
// 50,000 hits twice, the traced thread's CPU per hit on a loaded 2-CPU
// VM whose bare uprobe costs 21.5 µs): the frame-pointer stack (127
// frames through the ring) adds 21-24 µs, the 16 KiB copy 16-21 µs, the
// 8 KiB one (2 pages, what probekit trace --stack=cfi copied before --stack walked in BPF) 9-15 µs,
// one page 15-16 µs (the noise of that machine is about 5 µs); an
// earlier run measured the 16 KiB copy at 2.5 times the frame-pointer
// stack. On the same VM idle, unwinding a copied sample of 10 frames in
// user space takes 3.7 µs (BenchmarkUnwindSample), a row look-up 0.7 µs
// (BenchmarkFind).
//
// # Limits
//
//   - Depth: MaxFrames (127), and the frames whose return addresses lie
//     in the copy; a deeper stack ends with StopOutsideStack.
//   - Tables: Table keeps the section bytes plus 56 bytes per FDE and
//     computes rows on demand (Table.Size, BenchmarkLoad): Debian 12's
//     libc 364 KB for 3,713 FDEs, python3.11 985 KB for 10,221,
//     OpenJDK 17's libjvm 3.9 MB for 43,666; loading takes 6, 22 and
//     79 ms on a loaded 2-CPU VM.
//   - Objects without CFI, the vDSO and JIT code are walked by frame
//     pointers (saved rbp at rbp, return address at rbp+8); at a
//     function's first instruction there (Sample.AtEntry: Go, whose
//     functions have no .eh_frame) the first step takes the return
//     address at rsp.
//   - Expressions: DWARF expressions in CFA and register rules are
//     evaluated over the registers known (rip, rsp, rbp and those
//     recovered) and the copied stack: the .plt rule and glibc's
//     signal trampoline __restore_rt, whose rules read the interrupted
//     registers from the sigcontext on the stack. Branching operators
//     are ErrUnsupported.
//   - _start and thread start routines mark their return address
//     undefined (glibc's cfi_undefined (rip)): the walk ends there
//     with StopOutermost, as it does at a zero return address.
//   - A rule based on a register the BPF side did not copy (the CFA in
//     rdi of __longjmp) ends the walk with StopUnsupported.
//   - arm64 (UnwindMachine, Sample.Machine): the walk starts from pc,
//     sp, x29 and the link register x30, which holds the return address
//     until a prologue stores it; return addresses lose the bits above
//     the 48-bit user address space, where pointer authentication puts
//     its signature (DW_CFA_AARCH64_negate_ra_state marks such frames in
//     Row.RASigned). TestUnwindArm64 proves it on a real arm64 stack under
//     qemu's user-mode emulation, with and without pac-ret. The BPF side
//     copies x86-64 registers only: an arm64 kernel's copy is not built.
//     Other machines are refused (ErrUnsupported).
package unwind
