package record

import (
	"testing"

	"github.com/cilium/ebpf/asm"
)

// inlineConstants turns each load of a choice made before load into its
// value: every rewritten load of trace_usdt and trace_func becomes the
// value of the variable at its offset, the mode's loads among them.
func TestInlineConstants(t *testing.T) {
	spec, err := Spec()
	if err != nil {
		t.Fatal(err)
	}
	if err := SetMode(spec, ModeHist, 3); err != nil {
		t.Fatal(err)
	}
	if err := SetKeys(spec, []KeyPart{{Kind: KeyComm}, {Kind: KeyArg, Val: 2}}); err != nil {
		t.Fatal(err)
	}
	// The variables by offset, with the value each was set to.
	byOff := map[uint32]uint64{}
	for _, name := range []string{ModeName, HistValName, NTermsName} {
		var v uint32
		if err := spec.Variables[name].Get(&v); err != nil {
			t.Fatal(err)
		}
		byOff[spec.Variables[name].Offset] = uint64(v)
	}
	var keys uint64
	if err := spec.Variables[KeySpecName].Get(&keys); err != nil {
		t.Fatal(err)
	}
	byOff[spec.Variables[KeySpecName].Offset] = keys
	// .rodata as the variables lay it out.
	image := map[uint32]byte{}
	for _, v := range spec.Variables {
		if v.SectionName == ".rodata" {
			for k, c := range v.Value {
				image[v.Offset+uint32(k)] = c
			}
		}
	}
	before := spec.Copy()
	inlineConstants(spec)
	for _, prog := range []string{ProgramName, FuncProgramName} {
		old, insns := before.Programs[prog].Instructions, spec.Programs[prog].Instructions
		if len(old) != len(insns) {
			t.Fatalf("%s: %d instructions, was %d", prog, len(insns), len(old))
		}
		seen := map[uint32]int{}
		for i := range insns {
			if insns[i].OpCode == old[i].OpCode {
				continue
			}
			ld := old[i]
			off, ok := rodataOffset(old, i)
			if !ok || ld.OpCode.Class() != asm.LdXClass || insns[i].OpCode != asm.Mov.Op32(asm.ImmSource) {
				t.Fatalf("%s: instruction %d rewritten: %v, now %v (not a load at a known .rodata offset)", prog, i, ld, insns[i])
			}
			var want uint64
			for k := ld.OpCode.Size().Sizeof() - 1; k >= 0; k-- {
				want = want<<8 | uint64(image[off+uint32(k)])
			}
			if got := uint64(uint32(insns[i].Constant)); got != want {
				t.Errorf("%s: load of .rodata+%d became %#x, want %#x", prog, off, got, want)
			}
			if _, ok := byOff[off]; ok {
				seen[off]++
			}
		}
		if seen[spec.Variables[ModeName].Offset] == 0 || seen[spec.Variables[KeySpecName].Offset] == 0 {
			t.Errorf("%s: rewritten loads by offset %v: the mode's and the key spec's missing", prog, seen)
		}
	}
}

// rodataOffset finds, walking back from load i through code that no
// jump lands in (conditional jumps fall through to it), the .rodata
// address its source register was given and the constants added to it:
// the offset it loads from.
func rodataOffset(insns asm.Instructions, i int) (uint32, bool) {
	starts := map[asm.RawInstructionOffset]int{}
	landed := map[int]bool{}
	for it := insns.Iterate(); it.Next(); {
		starts[it.Offset] = it.Index
	}
	for it := insns.Iterate(); it.Next(); {
		if c := it.Ins.OpCode.Class(); (c == asm.JumpClass || c == asm.Jump32Class) && it.Ins.OpCode.JumpOp() != asm.Call && it.Ins.OpCode.JumpOp() != asm.Exit {
			landed[starts[it.Offset+it.Ins.Width()+asm.RawInstructionOffset(it.Ins.Offset)]] = true
		}
	}
	src, add := insns[i].Src, int64(insns[i].Offset)
	for k := i - 1; k >= 0; k-- {
		in := insns[k]
		if landed[k+1] {
			return 0, false
		}
		if op := in.OpCode; op.Class() == asm.JumpClass && (op.JumpOp() == asm.Ja || op.JumpOp() == asm.Exit ||
			op.JumpOp() == asm.Call && src <= asm.R5) { // a call keeps r6 to r9
			return 0, false
		}
		if in.Dst != src || in.OpCode.Class() == asm.JumpClass || in.OpCode.Class() == asm.Jump32Class {
			continue
		}
		switch {
		case in.IsLoadFromMap() && in.Reference() == ".rodata":
			return uint32(int64(uint32(uint64(in.Constant)>>32)) + add), true
		case in.OpCode == asm.Add.Op(asm.ImmSource):
			add += in.Constant
		case in.OpCode.Class() == asm.StXClass || in.OpCode.Class() == asm.StClass:
		default:
			return 0, false
		}
	}
	return 0, false
}
