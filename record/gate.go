package record

import (
	"fmt"

	"github.com/cilium/ebpf"
)

// The start gate: a trace attaches its probes one link after the other,
// so without it the first probe attached records hits while the last is
// not yet attached (a function's entries counted before its returns can
// fire, a USDT probe's hits before the uprobe beside it). With SetGate,
// the programs ignore every hit until Objects.Arm, which the attacher
// calls once every probe of the trace is attached: all probes start at
// one instant. Links attached after Arm (a followed process, a library
// loaded later) record from their first hit.
//
// The gate is a writable global of trace.c (probekit_trace_armed, in
// .bss) that user space writes through the map's memory mapping
// (ebpf.Variable; BPF_F_MMAPABLE arrays, Linux 5.5). Without SetGate the
// programs record from the start and the check costs nothing: its
// constant makes it dead code the verifier drops.

// Names in trace.c of the gate.
const (
	// GatedName is the constant that makes the programs wait for Arm.
	GatedName = "probekit_trace_gated"
	// ArmedName is the writable global Arm sets.
	ArmedName = "probekit_trace_armed"
)

// SetGate makes spec's programs record nothing until Objects.Arm.
func SetGate(spec *ebpf.CollectionSpec) error {
	v := spec.Variables[GatedName]
	if v == nil {
		return fmt.Errorf("record: no %s in the program", GatedName)
	}
	if err := v.Set(uint32(1)); err != nil {
		return fmt.Errorf("set %s: %w", GatedName, err)
	}
	return nil
}

// Arm opens the gate of programs loaded after SetGate: from now on they
// record every hit. Arming twice, or programs without the gate, is
// harmless.
func (o *Objects) Arm() error {
	if o.armed == nil {
		return fmt.Errorf("record: %s not loaded", ArmedName)
	}
	if err := o.armed.Set(uint32(1)); err != nil {
		return fmt.Errorf("arm the trace programs: %w", err)
	}
	return nil
}
