// Package bpfunwind unwinds user stacks of x86-64 code built without
// frame pointers inside BPF, from compact tables built in user space
// from each object's call-frame information (package unwind), so that
// stacks are whole and can be counted in the kernel with no event per
// hit.
//
// # The approach: tables in maps, the walk in BPF
//
// Build turns an object's CFI rows (unwind.Table.Spans) into Rows of 8
// bytes: a link-time address, the CFA rule (rsp or rbp plus an offset,
// or the .plt entries' rule) and where the caller's rbp is saved,
// relative to the CFA; the return address is at CFA-8 (the psABI's
// call). Rows equal to the one before are dropped, a gap between FDEs
// of 16 bytes or more gets a frame-pointer row, _start's undefined
// return address an outermost row, a signal trampoline a signal row,
// and what the walk cannot compute an unsupported row. Tables owns three maps and fills them: per process
// (a hash by PID) its executable mappings sorted by address, each with
// its object's id and bias; per object (an array) where its rows are;
// and one array of every object's rows, each object's sorted. An object
// is built once, shared by the processes that map it, and freed with
// the last (Add, Remove).
//
// The BPF side is usdt/bpf's unwind.bpf.h. probekit_cfi_user_stack
// walks from the uprobe's pt_regs: per frame, a binary search of the
// process's mappings, one of the object's rows, then CFA = rsp or rbp +
// offset, the return address and (where the row says) rbp read with
// bpf_probe_read_user, and on to the caller; where no row covers an
// address (an object without CFI, JIT code, the vDSO, a process not
// added) it steps by the frame record at rbp; at a function's entry
// (at_entry) in such code, by the return address at rsp.
// probekit_cfi_count_user_stack counts hits, and sums a value, by (pid,
// stack) in two hash maps, read back by ReadCounts. A program includes
// the header, then:
//
//	tables, _ := bpfunwind.New(nil)
//	tables.Prepare(spec) // the maps' sizes
//	coll, _ := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{MapReplacements: tables.Replacements()})
//	tables.Add(proc) // before its hits; again after it maps more
//
// Each frame's step is a global BPF function (probekit_cfi_step, Linux
// 5.6), verified once: the program of 127 frames verifies in about
// 316,000 instructions of the 1M limit on Linux 6.18 (most of them the
// mapping search's paths), and the tests pass on 5.10, 6.1 and 6.12
// (make test-kernels' VMs). No bpf_loop is needed; the frame
// loop is bounded (5.3).
//
// The other approach, a copy of the stack top unwound in user space
// (package unwind, stack.bpf.h's probekit_copy_stack), walks the same
// frames (TestSameAsUserSpace) but sends 8-16 KiB per hit through the
// ring; it cannot count in the kernel.
//
// # Cost
//
// BenchmarkWalk, the BPF run time of one hit (BPF_STATS_RUN_TIME) at
// the entry of chain_end, 10 frames down to _start, 50,000 hits twice
// on a loaded 2-CPU VM (Linux 6.18):
//
//	                         frame pointers   without (-fomit-frame-pointer)
//	bare program             74-87 ns         75-76 ns
//	bpf_get_stack            5,604-5,786 ns   5,259-5,486 ns (2 frames)
//	  (8 frames: it stops in libc)
//	this walk                1,018-1,333 ns   981-987 ns (10 frames)
//	counted, bpf_get_stackid 5,437-6,053 ns   6,305-6,357 ns
//	counted, this walk       1,114-1,132 ns   1,388-1,392 ns
//
// The walk costs about a fifth of the kernel's frame-pointer walk of
// the same stack, and gives every frame; an earlier run of the same benchmark measured 1,246-1,394 ns
// against 5,967-6,733. The uprobe's trap itself (20-60 µs per hit on
// that VM, ns/op) is far beyond both.
//
// Tables (BenchmarkBuild): Debian 12's libc 23,331 rows (186,648 bytes)
// from 25,212 CFI rows, built in 31-59 ms; python3.11 58,511 rows
// (468,088 bytes) from 61,382, 67-74 ms; OpenJDK 17's libjvm.so 129,214
// rows (1,033,712 bytes) from 197,070, 184 ms. A process's mappings take
// 8,200 bytes.
//
// # Limits
//
//   - Depth: PROBEKIT_CFI_MAX_FRAMES, 127 by default (MaxFrames); a
//     deeper stack ends with StopDepth.
//   - Sizes: the rows map holds Options.Rows rows (DefaultRows, 1Mi:
//     8 MiB preallocated; $PROBEKIT_CFI_ROWS when Options.Rows is 0),
//     at most 2^24; Options.Objects objects;
//     Options.Processes processes, each with at most MaxMappings (256)
//     executable mappings (the rest are walked by frame pointers). An
//     object that does not fit (ErrFull), or with an FDE that reaches past
//     4 GiB of link-time address (ErrAddressRange: rows hold 32-bit
//     addresses; one ending at 4 GiB exactly is kept), is walked by
//     frame pointers (Tables.Errors).
//   - A process stays in the maps until Remove or a Refresh after it
//     exited; Add fails once Options.Processes are in.
//   - An object no process maps any more is freed, but its id and rows
//     go to another object only Options.ReuseAfter later
//     (DefaultReuseAfter, 30 s: a walk is one BPF run inside an RCU
//     reader, and the kernel reports a reader of 21 s as stalled), so
//     that a walk that read its id never reads another object's rows;
//     loaded again
//     meanwhile, it takes them back. An object refused as ErrFull is
//     tried again once ids or rows are freed (Stats.Refused counts the
//     refusals by reason).
//   - Objects mapped after Add (dlopen) are walked by frame pointers
//     until the next Add or Refresh (which adds every process again). Watch adds a launched command again at its
//     program's entry point (procmaps.LaunchEntry), where its shared
//     libraries are mapped and its own code has not run.
//   - JIT code, the vDSO and objects without CFI (Go, which writes no
//     .eh_frame) are walked by frame pointers; Go's goroutines end at a
//     zero rbp (StopOutermost).
//   - Signal frames: a signal trampoline's row ("S" augmentation with
//     glibc's CFA expression, __restore_rt: KindSignal) takes the
//     interrupted rip, rsp and rbp from the sigcontext the kernel saved
//     on the stack, and the interrupted instruction is looked up
//     itself, not minus 1 (TestSignalFrame). Other registers of the
//     interrupted code are not tracked.
//   - The walk ends (StopUnsupported) at a CFA based on another
//     register (__longjmp's rdi) or an expression other than .plt's, a
//     return address not at CFA-8, a CFA offset beyond ±32 KiB or an
//     rbp saved beyond ±1 KiB of the CFA.
//   - _start and thread start routines mark their return address
//     undefined: the walk ends there with StopOutermost.
//   - A stack's id is a 63-bit hash of its frames: two stacks with one
//     hash would be counted as one. A full stacks or counts map loses
//     the hit (-ENOMEM).
//   - The walk keeps its state in a per-CPU scratch record: a uprobe
//     program is not re-entered on its CPU (trace_call_bpf holds
//     bpf_prog_active).
//   - x86-64 only: arm64 rows (the link register, pointer
//     authentication) are not built.
package bpfunwind
