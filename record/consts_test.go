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
	before := spec.Copy()
	inlineConstants(spec)
	for _, prog := range []string{ProgramName, FuncProgramName} {
		old, insns := before.Programs[prog].Instructions, spec.Programs[prog].Instructions
		if len(old) != len(insns) {
			t.Fatalf("%s: %d instructions, was %d", prog, len(insns), len(old))
		}
		seen := map[uint32]int{}
		for i := 1; i < len(insns); i++ {
			if insns[i].OpCode == old[i].OpCode {
				continue
			}
			addr, ld := old[i-1], old[i]
			if addr.Reference() != ".rodata" || ld.OpCode.Class() != asm.LdXClass {
				t.Fatalf("%s: instruction %d rewritten: %v after %v, now %v", prog, i, ld, addr, insns[i])
			}
			off := uint32(uint64(addr.Constant)>>32) + uint32(ld.Offset)
			got := uint64(uint32(insns[i].Constant))
			if insns[i].OpCode.Class() == asm.ALU64Class { // the pair became one 64-bit constant
				got = uint64(insns[i-1].Constant)
			}
			if want, ok := byOff[off]; ok {
				if got != want {
					t.Errorf("%s: load of .rodata+%d became %#x, want %#x", prog, off, got, want)
				}
				seen[off]++
			}
		}
		if seen[spec.Variables[ModeName].Offset] == 0 || seen[spec.Variables[KeySpecName].Offset] == 0 {
			t.Errorf("%s: rewritten loads by offset %v: the mode's and the key spec's missing", prog, seen)
		}
	}
}
