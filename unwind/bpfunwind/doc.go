// Package bpfunwind unwinds user stacks of x86-64 code built without
// frame pointers inside BPF, from tables built in user space from each
// object's call-frame information (package unwind), so that stacks can
// be counted in the kernel with no event per hit.
//
// The BPF side is usdt/bpf's unwind.bpf.h (probekit_cfi_user_stack,
// probekit_cfi_count_user_stack); Tables owns the maps it reads and
// fills them for the processes added.
package bpfunwind
