package record

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
)

// Names of the interpreter walk (trace.c, python.bpf.h).
const (
	// InterpMapName is python.bpf.h's map of processes
	// (python.Tables' replacement): given in LoadSpecOptions'
	// MapReplacements with a CFI stack, the records and counted stacks
	// carry the interpreter frames.
	InterpMapName = "probekit_py_procs"
	// InterpProgramName and InterpFuncProgramName walk the
	// interpreter frames, then tail-call ProgramName and
	// FuncProgramName (trace_progs).
	InterpProgramName     = "trace_usdt_interp"
	InterpFuncProgramName = "trace_func_interp"
	interpScratchName     = "trace_stack_scratch"
	interpRecordsName     = "probekit_trace_interp"
	tailMapName           = "trace_progs"
	tailUSDT, tailFunc    = uint32(0), uint32(1)
)

type loadInterpUSDT struct {
	Program *ebpf.Program `ebpf:"trace_usdt_interp"`
	Tail    *ebpf.Map     `ebpf:"trace_progs"`
}

type loadInterpFunc struct {
	Program *ebpf.Program `ebpf:"trace_func_interp"`
	Tail    *ebpf.Map     `ebpf:"trace_progs"`
}

// wantsInterp reports whether a load walks interpreter frames: its
// stacks are the CFI walk's (records or a key) and the caller gave the
// interpreter map.
func wantsInterp(opts *ebpf.CollectionOptions, cfi bool) bool {
	return cfi && opts != nil && opts.MapReplacements[InterpMapName] != nil
}

// interpWanted is wantsInterp for spec before load.
func interpWanted(spec *ebpf.CollectionSpec, opts *ebpf.CollectionOptions) bool {
	var stackMode uint32
	if v := spec.Variables[StackName]; v == nil || v.Get(&stackMode) != nil {
		return false
	}
	cfiPart, err := cfiKeyPart(spec)
	return err == nil && wantsInterp(opts, cfiPart > 0 || stackMode == stackCFI)
}

// loadInterp loads the interpreter walk in front of o's programs: each
// walks the hit's interpreter frames into trace_stack_scratch (its own
// program, verified apart from the trace program) and tail-calls the
// trace program, which reads them. o.Program and o.FuncProgram become
// the walks (what is attached); the trace programs stay in o.tail.
// On error, o is unchanged and what was loaded is closed.
func (o *Objects) loadInterp(spec *ebpf.CollectionSpec, which Programs, opts *ebpf.CollectionOptions) error {
	repl := map[string]*ebpf.Map{}
	for k, v := range opts.MapReplacements {
		repl[k] = v
	}
	repl[interpScratchName] = o.interpScratch
	o2 := *opts
	o2.MapReplacements = repl
	var walks [2]*ebpf.Program
	var tail *ebpf.Map
	fail := func(err error) error {
		for _, p := range walks {
			p.Close()
		}
		tail.Close()
		return fmt.Errorf("load the interpreter walk: %w", err)
	}
	// Each walk program as the trace program is loaded (attach type,
	// sleepable flag): a tail call needs them alike.
	sp := spec.Copy()
	for walk, prog := range map[string]string{InterpProgramName: ProgramName, InterpFuncProgramName: FuncProgramName} {
		sp.Programs[walk].AttachType = sp.Programs[prog].AttachType
		sp.Programs[walk].Flags = sp.Programs[prog].Flags
	}
	if which&USDTProgram != 0 {
		var l loadInterpUSDT
		if err := sp.LoadAndAssign(&l, &o2); err != nil {
			return fail(err)
		}
		walks[0], tail = l.Program, l.Tail
		repl[tailMapName] = tail
	}
	if which&FuncProgram != 0 {
		var l loadInterpFunc
		if err := sp.LoadAndAssign(&l, &o2); err != nil {
			return fail(err)
		}
		walks[1] = l.Program
		if tail == nil {
			tail = l.Tail
		}
	}
	if o.Program != nil {
		if err := tail.Put(tailUSDT, o.Program); err != nil {
			return fail(err)
		}
	}
	if o.FuncProgram != nil {
		if err := tail.Put(tailFunc, o.FuncProgram); err != nil {
			return fail(err)
		}
	}
	o.tail = []*ebpf.Program{o.Program, o.FuncProgram}
	o.tailMap = tail
	if walks[0] != nil {
		o.Program = walks[0]
	}
	if walks[1] != nil {
		o.FuncProgram = walks[1]
	}
	return nil
}

// closeInterp closes what loadInterp loaded.
func (o *Objects) closeInterp() error {
	var errs []error
	for _, p := range o.tail {
		errs = append(errs, p.Close())
	}
	errs = append(errs, o.tailMap.Close(), o.interpScratch.Close())
	return errors.Join(errs...)
}

// setInterpRecords sets trace.c's probekit_trace_interp when the load
// walks interpreter frames (wantsInterp), so that records carry them;
// otherwise their copy is dead code the verifier does not walk.
func setInterpRecords(spec *ebpf.CollectionSpec, opts *ebpf.CollectionOptions, cfiPart int) error {
	v := spec.Variables[interpRecordsName]
	if v == nil {
		return fmt.Errorf("record: no %s in the trace program", interpRecordsName)
	}
	var stackMode uint32
	if err := spec.Variables[StackName].Get(&stackMode); err != nil {
		return fmt.Errorf("read %s: %w", StackName, err)
	}
	on := uint32(0)
	if wantsInterp(opts, cfiPart > 0 || stackMode == stackCFI) {
		on = 1
	}
	return v.Set(on)
}
