package record

import (
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"
)

// FaultStrsName is the constant that makes the programs retry a failed
// string read after faulting its pages in (see SetFaultingStrings).
const FaultStrsName = "probekit_trace_fault_strs"

// SetFaultingStrings makes spec's programs sleepable (BPF_F_SLEEPABLE)
// and their string reads faulting: a read that bpf_probe_read_user_str
// fails, as it does for a page the process has not touched yet (a string
// literal in .rodata at a function's first call, a page swapped out), is
// tried again after bpf_copy_from_user faulted the string's pages in. The
// values, records, keys (KeyStr) and filter terms (FilterStr) read as
// strings all do. The kernel must run sleepable uprobe programs (Linux
// 6.0; features.SleepableUprobe). A string that still cannot be read (an
// address the process has not mapped) is an error as before.
//
// A sleepable program may use only some map types (array, hash, ring
// buffer, local storage: check_map_prog_compatibility in
// kernel/bpf/verifier.c, 6.18 included), checked at each map reference,
// reached or not. The one other type of the programs is KeyStack's stack
// trace map: with a KeyStack key part the programs load non-sleepable;
// without, its references (dead code then) are taken out. Should a
// kernel refuse the sleepable programs all the same, LoadSpec loads them
// without it. Objects.FaultingStrings says which it did.
func SetFaultingStrings(spec *ebpf.CollectionSpec) error {
	if err := spec.Variables[FaultStrsName].Set(uint32(1)); err != nil {
		return fmt.Errorf("set %s: %w", FaultStrsName, err)
	}
	for _, name := range []string{ProgramName, FuncProgramName} {
		if p := spec.Programs[name]; p != nil {
			p.Flags |= unix.BPF_F_SLEEPABLE
		}
	}
	return nil
}

// faultingStrings reports whether spec has SetFaultingStrings.
func faultingStrings(spec *ebpf.CollectionSpec) bool {
	var on uint32
	v := spec.Variables[FaultStrsName]
	return v != nil && v.Get(&on) == nil && on != 0
}

// withoutFaultingStrings undoes SetFaultingStrings on spec.
func withoutFaultingStrings(spec *ebpf.CollectionSpec) error {
	if err := spec.Variables[FaultStrsName].Set(uint32(0)); err != nil {
		return fmt.Errorf("set %s: %w", FaultStrsName, err)
	}
	for _, name := range []string{ProgramName, FuncProgramName} {
		if p := spec.Programs[name]; p != nil {
			p.Flags &^= unix.BPF_F_SLEEPABLE
		}
	}
	return nil
}

// stackTracesName is KeyStack's map, of a type sleepable programs may
// not use.
const stackTracesName = "stack_traces"

// dropStackTraceLoads prepares spec's faulting strings for the load: with
// a KeyStack key part it undoes them (the stack trace map is in use);
// without, each load of the map's address becomes a load of 0, in code
// that is dead then.
func dropStackTraceLoads(spec *ebpf.CollectionSpec) error {
	if !faultingStrings(spec) {
		return nil
	}
	var keys uint64
	if err := spec.Variables[KeySpecName].Get(&keys); err != nil {
		return fmt.Errorf("read %s: %w", KeySpecName, err)
	}
	for i := range MaxKeys {
		if KeyKind(keys>>(8*i+4)&0xf) == KeyStack {
			return withoutFaultingStrings(spec)
		}
	}
	for _, p := range spec.Programs {
		insns := make(asm.Instructions, len(p.Instructions))
		copy(insns, p.Instructions)
		for i, ins := range insns {
			if ins.IsLoadFromMap() && ins.Reference() == stackTracesName {
				repl := asm.LoadImm(ins.Dst, 0, asm.DWord).WithSymbol(ins.Symbol()).WithSource(ins.Source())
				insns[i] = btf.WithFuncMetadata(repl, btf.FuncMetadata(&ins))
			}
		}
		p.Instructions = insns
	}
	return nil
}
