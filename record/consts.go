package record

import (
	"math"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
)

// inlineConstants replaces, in each program of spec, each load from a
// .rodata variable at an offset known where it is made (an address
// register clang set to a place in .rodata, with a constant added, and
// not changed since) with the variable's value as an immediate, in the
// same number of instruction slots: a hit then reads no .rodata for the
// choices made before load. The verifier knows the values either way
// (the map is frozen), and drops the same branches; what the rewrite
// saves is the memory access (measured with bpf stats on a 2-CPU virtual
// machine: a program that read one such variable and returned took
// about 40 ns a hit more than one that read none). Addresses are
// followed within straight-line code: at a jump target, a call or any
// other write of the register they are forgotten. A load of 8 bytes
// whose value does not fit 32 bits, or not wholly inside one variable,
// is left as it is.
func inlineConstants(spec *ebpf.CollectionSpec) {
	type span struct {
		off   uint32
		value []byte
	}
	var vars []span
	for _, v := range spec.Variables {
		if v.SectionName == ".rodata" && v.Value != nil {
			vars = append(vars, span{v.Offset, v.Value})
		}
	}
	value := func(off uint32, size int) (uint64, bool) {
		for _, v := range vars {
			if off < v.off || uint64(off)+uint64(size) > uint64(v.off)+uint64(len(v.value)) {
				continue
			}
			b := v.value[off-v.off:]
			switch size {
			case 1:
				return uint64(b[0]), true
			case 2:
				return uint64(spec.ByteOrder.Uint16(b)), true
			case 4:
				return uint64(spec.ByteOrder.Uint32(b)), true
			case 8:
				return spec.ByteOrder.Uint64(b), true
			}
			return 0, false
		}
		return 0, false
	}
	for _, p := range spec.Programs {
		insns := p.Instructions
		// Jump targets, by raw offset.
		targets := map[asm.RawInstructionOffset]bool{}
		for it := insns.Iterate(); it.Next(); {
			op := it.Ins.OpCode
			if c := op.Class(); (c == asm.JumpClass || c == asm.Jump32Class) && op.JumpOp() != asm.Call && op.JumpOp() != asm.Exit {
				off := int64(it.Ins.Offset)
				if op.JumpOp() == asm.Ja && c == asm.Jump32Class {
					off = it.Ins.Constant // gotol
				}
				targets[asm.RawInstructionOffset(int64(it.Offset)+int64(it.Ins.Width())+off)] = true
			}
		}
		// at[r]: register r holds the address .rodata + at[r] (known[r]).
		var at [asm.R10 + 1]int64
		var known [asm.R10 + 1]bool
		raw := asm.RawInstructionOffset(0)
		for i := range insns {
			ins := insns[i]
			if targets[raw] {
				known = [asm.R10 + 1]bool{}
			}
			raw += ins.Width()
			op := ins.OpCode
			switch {
			case ins.IsLoadFromMap() && ins.Src == asm.PseudoMapValue && ins.Reference() == ".rodata":
				at[ins.Dst], known[ins.Dst] = int64(uint32(uint64(ins.Constant)>>32)), true
				continue
			case op.Class() == asm.ALU64Class && op.ALUOp() == asm.Add && op.Source() == asm.ImmSource && ins.Dst <= asm.R10 && known[ins.Dst]:
				at[ins.Dst] += ins.Constant
				continue
			case op.Class() == asm.LdXClass && op.Mode() == asm.MemMode && ins.Src <= asm.R10 && known[ins.Src]:
				off := at[ins.Src] + int64(ins.Offset)
				size := op.Size().Sizeof()
				if x, ok := value(uint32(off), size); ok && off >= 0 && off <= math.MaxUint32 && size > 0 && x <= math.MaxUint32 {
					mov := asm.Mov.Imm32(ins.Dst, int32(uint32(x)))
					mov.Metadata = ins.Metadata
					insns[i] = mov
				}
			case op.Class() == asm.JumpClass && op.JumpOp() == asm.Call:
				for r := asm.R0; r <= asm.R5; r++ {
					known[r] = false
				}
				continue
			}
			// Any other write of a register forgets its address.
			if d := ins.Dst; d <= asm.R10 && writesDst(op) {
				known[d] = false
			}
		}
	}
}

// writesDst reports whether an instruction of op writes its destination
// register (ALU, loads; not stores, jumps or exits).
func writesDst(op asm.OpCode) bool {
	switch op.Class() {
	case asm.ALUClass, asm.ALU64Class, asm.LdClass, asm.LdXClass:
		return true
	}
	return false
}

// dropDeadLoads replaces, in each program of spec, each instruction
// that only sets a register to a constant (a 64-bit immediate load, a
// map value's address, a move of an immediate) where straight-line code
// after it sets the register again before anything reads it: what
// inlineConstants leaves of the address of a .rodata variable it turned
// into an immediate, and the immediates themselves that the verifier's
// branch pruning made dead. Each becomes jumps by 0 (as many as its
// slots), which the verifier removes (Linux 5.1, opt_remove_nops): a
// hit no longer executes it, and jump offsets stay as they are. A jump,
// call or exit before the next write keeps the instruction.
func dropDeadLoads(spec *ebpf.CollectionSpec) {
	nop := asm.Instruction{OpCode: asm.Ja.Op(asm.ImmSource)}
	for _, p := range spec.Programs {
		insns := p.Instructions
		out := make(asm.Instructions, 0, len(insns))
		for i, ins := range insns {
			if !setsConstant(ins) || !deadAfter(insns[i+1:], ins.Dst) {
				out = append(out, ins)
				continue
			}
			first := btf.WithFuncMetadata(nop.WithSymbol(ins.Symbol()).WithSource(ins.Source()), btf.FuncMetadata(&ins))
			out = append(out, first)
			if ins.Width() == 2 {
				out = append(out, nop)
			}
		}
		p.Instructions = out
	}
}

// setsConstant reports whether ins sets its destination to a constant
// and does nothing else: a 64-bit immediate load or a move of an
// immediate.
func setsConstant(ins asm.Instruction) bool {
	op := ins.OpCode
	if op == asm.LoadImmOp(asm.DWord) {
		return true
	}
	return (op.Class() == asm.ALUClass || op.Class() == asm.ALU64Class) && op.ALUOp() == asm.Mov && op.Source() == asm.ImmSource
}

// deadAfter reports whether straight-line code from the start of insns
// sets r again before it reads it or leaves the line (a jump, a call, an
// exit). Registers an instruction reads: an ALU operation its
// destination (but a move) and a register source, a load its source,
// stores and atomics both; any other kind counts as reading r.
func deadAfter(insns asm.Instructions, r asm.Register) bool {
	for _, ins := range insns {
		op := ins.OpCode
		switch c := op.Class(); {
		case c.IsJump():
			return false
		case c == asm.ALUClass || c == asm.ALU64Class:
			reg := op.Source() == asm.RegSource
			if reg && ins.Src == r || op.ALUOp() != asm.Mov && ins.Dst == r {
				return false
			}
			if ins.Dst == r {
				return true
			}
		case c == asm.LdXClass && op.Mode() == asm.MemMode:
			if ins.Src == r {
				return false
			}
			if ins.Dst == r {
				return true
			}
		case op == asm.LoadImmOp(asm.DWord):
			if ins.Dst == r {
				return true
			}
		case c == asm.StClass && op.Mode() == asm.MemMode:
			if ins.Dst == r {
				return false
			}
		case c == asm.StXClass && op.Mode() == asm.MemMode:
			if ins.Dst == r || ins.Src == r {
				return false
			}
		default:
			return false
		}
	}
	return false
}
