package exporter

import (
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"

	"github.com/probekit/probekit/internal/features"
)

// faultStrsName is export.c's constant that makes a failed string label
// read fault the string's pages in and read again (faultstr.bpf.h).
const faultStrsName = "probekit_export_fault_strs"

// setFaultingStrings makes spec's programs sleepable with faulting string
// reads where the kernel runs sleepable uprobe programs (Linux 6.0,
// features.SleepableUprobe), so that a string label at a probe's first
// hit (a literal in a page the process has not touched yet) is read, not
// lost as value_unreadable. It reports whether it did. Every map of the
// program is of a type sleepable programs may use (array, hash, LRU
// hash and their per-CPU forms: check_map_prog_compatibility in
// kernel/bpf/verifier.c).
func setFaultingStrings(spec *ebpf.CollectionSpec) (bool, error) {
	ok, err := features.Have(features.SleepableUprobe)
	if err != nil || !ok {
		return false, faultingStrings(spec, false) // strings read as before
	}
	return true, faultingStrings(spec, true)
}

// faultingStrings sets or clears spec's faulting string reads. Cleared,
// each bpf_copy_from_user call becomes r0 = -EFAULT: behind the constant
// it is dead code, but a kernel that marks a global function as one that
// may sleep from its instructions, reached or not (Linux 6.18 does),
// refuses to call it from a program that is not sleepable.
func faultingStrings(spec *ebpf.CollectionSpec, on bool) error {
	v := uint32(0)
	if on {
		v = 1
	}
	if err := spec.Variables[faultStrsName].Set(v); err != nil {
		return fmt.Errorf("set %s: %w", faultStrsName, err)
	}
	for _, p := range spec.Programs {
		if on {
			p.Flags |= unix.BPF_F_SLEEPABLE
			continue
		}
		p.Flags &^= unix.BPF_F_SLEEPABLE
		insns := make(asm.Instructions, len(p.Instructions))
		copy(insns, p.Instructions)
		for i, ins := range insns {
			if ins.IsBuiltinCall() && ins.Constant == int64(asm.FnCopyFromUser) {
				repl := asm.Mov.Imm(asm.R0, -int32(unix.EFAULT)).WithSymbol(ins.Symbol()).WithSource(ins.Source())
				insns[i] = btf.WithFuncMetadata(repl, btf.FuncMetadata(&ins))
			}
		}
		p.Instructions = insns
	}
	return nil
}

// newCollection loads spec, sleepable with faulting string reads where
// the kernel allows; should it refuse the sleepable programs, it loads
// them as before.
func newCollection(spec *ebpf.CollectionSpec) (*ebpf.Collection, error) {
	faulting, err := setFaultingStrings(spec)
	if err != nil {
		return nil, err
	}
	coll, err := ebpf.NewCollection(spec)
	if err == nil || !faulting {
		return coll, err
	}
	if err := faultingStrings(spec, false); err != nil {
		return nil, err
	}
	return ebpf.NewCollection(spec)
}
