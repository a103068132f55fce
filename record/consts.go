package record

import (
	"math"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

// inlineConstants replaces, in each program of spec, each load of a
// .rodata variable that clang emits as a pair (the variable's address,
// then a load through that address into the same register) with the
// variable's value as an immediate, in the same number of instruction
// slots: a hit then reads no .rodata for the choices made before load.
// The verifier knows the values either way (the map is frozen), and
// drops the same branches; what the rewrite saves is the memory access
// (measured with bpf stats on a 2-CPU virtual machine: a program that
// read one such variable and returned took about 40 ns a hit more than
// one that read none). A load that is a jump target, or not wholly
// inside one variable, is left as it is.
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
		raw := asm.RawInstructionOffset(0)
		for i := 0; i+1 < len(insns); i++ {
			addr, ld := insns[i], insns[i+1]
			next := raw + addr.Width()
			raw = next
			if !addr.IsLoadFromMap() || addr.Src != asm.PseudoMapValue || addr.Reference() != ".rodata" ||
				ld.OpCode.Class() != asm.LdXClass || ld.OpCode.Mode() != asm.MemMode ||
				ld.Src != addr.Dst || targets[next] {
				continue
			}
			off := int64(uint32(uint64(addr.Constant)>>32)) + int64(ld.Offset)
			size := ld.OpCode.Size().Sizeof()
			if off < 0 || off > math.MaxUint32 || size <= 0 {
				continue
			}
			x, ok := value(uint32(off), size)
			switch {
			case !ok:
			case x <= math.MaxUint32:
				// The address stays (loading it reads no memory): a
				// later instruction may use it.
				mov := asm.Mov.Imm32(ld.Dst, int32(uint32(x)))
				mov.Metadata = ld.Metadata
				insns[i+1] = mov
			case ld.Dst == addr.Dst:
				imm := asm.LoadImm(addr.Dst, int64(x), asm.DWord)
				imm.Metadata = addr.Metadata
				insns[i] = imm.WithReference("")
				mov := asm.Mov.Reg(ld.Dst, ld.Dst)
				mov.Metadata = ld.Metadata
				insns[i+1] = mov
			}
		}
	}
}
