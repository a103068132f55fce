package record

import (
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

// cfiFunction and cfiFramesFunction are trace.c's global functions that
// walk a stack by CFI: for a KeyStackCFI key part, and for the stacks of
// records (SetStackCFI).
const (
	cfiFunction       = "trace_cfi_stack_id"
	cfiFramesFunction = "trace_cfi_frames"
)

// eOpNotSupp is EOPNOTSUPP, what both return when the load does not
// want the walk.
const eOpNotSupp = 95

// dropCFIWalk takes out of spec's programs the CFI walks the load does
// not use (keyed: a KeyStackCFI key part; frames: SetStackCFI): each call
// of their function becomes r0 = -EOPNOTSUPP (what it returns then), and
// the functions no longer called leave the program. A kernel that
// verifies every global function of a program, called or not (Linux 6.1
// does; 6.18 verifies only those called), would otherwise spend on the
// walk's global functions part of the million instructions the whole
// program may take.
func dropCFIWalk(spec *ebpf.CollectionSpec, keyed, frames bool) {
	drop := func(ref string) bool {
		return ref == cfiFunction && !keyed || ref == cfiFramesFunction && !frames
	}
	for _, p := range spec.Programs {
		insns := make(asm.Instructions, len(p.Instructions))
		copy(insns, p.Instructions)
		for i, ins := range insns {
			if ins.IsFunctionCall() && drop(ins.Reference()) {
				repl := asm.Mov.Imm(asm.R0, -eOpNotSupp)
				repl.Metadata = ins.Metadata
				insns[i] = repl.WithReference("")
			}
		}
		p.Instructions = reachableFunctions(insns)
	}
}

// reachableFunctions returns insns without the functions (runs of
// instructions from one symbol to the next) that no call reaches from
// the first.
func reachableFunctions(insns asm.Instructions) asm.Instructions {
	type fn struct{ start, end int }
	var fns []fn
	index := map[string]int{}
	for i, ins := range insns {
		if sym := ins.Symbol(); sym != "" || i == 0 {
			if len(fns) > 0 {
				fns[len(fns)-1].end = i
			}
			index[sym] = len(fns)
			fns = append(fns, fn{start: i})
		}
	}
	if len(fns) == 0 {
		return insns
	}
	fns[len(fns)-1].end = len(insns)
	keep := make([]bool, len(fns))
	keep[0] = true
	for todo := []int{0}; len(todo) > 0; {
		f := fns[todo[len(todo)-1]]
		todo = todo[:len(todo)-1]
		for _, ref := range insns[f.start:f.end].FunctionReferences() {
			if j, ok := index[ref]; ok && !keep[j] {
				keep[j] = true
				todo = append(todo, j)
			}
		}
	}
	out := make(asm.Instructions, 0, len(insns))
	for j, f := range fns {
		if keep[j] {
			out = append(out, insns[f.start:f.end]...)
		}
	}
	return out
}
