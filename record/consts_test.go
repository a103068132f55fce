package record

import (
	"slices"
	"testing"

	"github.com/cilium/ebpf"
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

// dropDeadLoads turns into jumps by 0 exactly the constants that are set
// again before any read, in as many slots, keeping a symbol.
func TestDropDeadLoads(t *testing.T) {
	mov := func(r asm.Register, v int32) asm.Instruction { return asm.Mov.Imm(r, v) }
	for _, c := range []struct {
		name  string
		insns asm.Instructions
		dead  []int // indexes dropped
	}{
		{"address then immediate", asm.Instructions{asm.LoadImm(asm.R1, 1<<40, asm.DWord), mov(asm.R1, 1), asm.Return()}, []int{0}},
		{"immediate then immediate", asm.Instructions{mov(asm.R1, 1), asm.Mov.Imm32(asm.R1, 2), asm.Return()}, []int{0}},
		{"other registers between", asm.Instructions{asm.LoadImm(asm.R1, 1<<40, asm.DWord), mov(asm.R2, 1), asm.StoreMem(asm.R10, -8, asm.R2, asm.DWord), asm.LoadMem(asm.R3, asm.R10, -8, asm.DWord), mov(asm.R1, 0), asm.Return()}, []int{0}},
		{"load through it", asm.Instructions{asm.LoadImm(asm.R1, 1<<40, asm.DWord), asm.LoadMem(asm.R2, asm.R1, 0, asm.Word), mov(asm.R1, 0), asm.Return()}, nil},
		{"ALU source", asm.Instructions{mov(asm.R1, 3), asm.Add.Reg(asm.R2, asm.R1), mov(asm.R1, 0), asm.Return()}, nil},
		{"ALU destination", asm.Instructions{mov(asm.R1, 3), asm.Add.Imm(asm.R1, 2), mov(asm.R1, 0), asm.Return()}, nil},
		{"stored", asm.Instructions{mov(asm.R1, 3), asm.StoreMem(asm.R10, -8, asm.R1, asm.DWord), mov(asm.R1, 0), asm.Return()}, nil},
		{"store base", asm.Instructions{mov(asm.R1, 3), asm.StoreImm(asm.R1, 0, 0, asm.Word), mov(asm.R1, 0), asm.Return()}, nil},
		{"jump between", asm.Instructions{mov(asm.R1, 3), asm.JEq.Imm(asm.R2, 0, "x"), mov(asm.R1, 0).WithSymbol("x"), asm.Return()}, nil},
		{"call between", asm.Instructions{mov(asm.R1, 3), asm.FnGetCurrentPidTgid.Call(), mov(asm.R1, 0), asm.Return()}, nil},
		{"exit after", asm.Instructions{mov(asm.R0, 3), asm.Return()}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.insns[0] = c.insns[0].WithSymbol("prog")
			spec := &ebpf.CollectionSpec{Programs: map[string]*ebpf.ProgramSpec{"prog": {Instructions: c.insns}}}
			dropDeadLoads(spec)
			got := spec.Programs["prog"].Instructions
			if got.Size() != c.insns.Size() || got.Name() != "prog" {
				t.Fatalf("%d bytes named %q, was %d", got.Size(), got.Name(), c.insns.Size())
			}
			var want asm.Instructions
			for i, ins := range c.insns {
				if slices.Contains(c.dead, i) {
					for range ins.Width() {
						want = append(want, asm.Instruction{OpCode: asm.Ja.Op(asm.ImmSource)})
					}
					continue
				}
				want = append(want, ins)
			}
			for i := range want {
				w, g := want[i], got[i]
				if w.OpCode == asm.Ja.Op(asm.ImmSource) {
					if g.OpCode != w.OpCode || g.Offset != 0 {
						t.Errorf("instruction %d: %v, want a jump by 0", i, g)
					}
				} else if g.OpCode != w.OpCode || g.Dst != w.Dst || g.Constant != w.Constant {
					t.Errorf("instruction %d: %v, want %v", i, g, w)
				}
			}
		})
	}
}
