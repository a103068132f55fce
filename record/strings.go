package record

import (
	"fmt"

	"github.com/cilium/ebpf"
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
// A kernel may refuse a sleepable program that the same kernel loads
// non-sleepable (Linux 6.1 lets sleepable programs use only some map
// types): LoadSpec then loads the programs without it, and
// Objects.FaultingStrings says which it did.
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
