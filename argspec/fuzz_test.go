package argspec

import (
	"debug/elf"
	"reflect"
	"testing"
)

// FuzzParse feeds arbitrary strings to every architecture's grammar (the
// machine is a fuzz input, an index into supportedMachines). Parse must
// not panic or hang, must return arguments or an error (never both, never
// more than MaxArgs), and whatever parses must round-trip: Parse of the
// canonical Format gives the same arguments except for Operand, which
// becomes the canonical text (Unsupported arguments keep theirs).
func FuzzParse(f *testing.F) {
	for _, tc := range append(append([]parseCase{}, realStrings...), edgeStrings...) {
		f.Add(machineIndex(tc.machine), tc.in)
	}
	for _, rf := range realFiles {
		for _, n := range readNotes(f, rf.file) {
			f.Add(machineIndex(rf.machine), n.args)
		}
	}
	for i := range supportedMachines {
		for _, s := range []string{"4@i%ra+1r", "4@[x32,200]", "4@-12(42)", "8@[sp, 112", "-0@", "+4@%rdi"} {
			f.Add(uint8(i), s)
		}
	}
	f.Fuzz(func(t *testing.T, mi uint8, s string) {
		machine := supportedMachines[int(mi)%len(supportedMachines)]
		args, err := Parse(machine, s)
		if err != nil {
			if args != nil {
				t.Fatalf("Parse(%v, %q) returned %v and %v", machine, s, args, err)
			}
			return
		}
		if len(args) > MaxArgs {
			t.Fatalf("Parse(%v, %q): %d args", machine, s, len(args))
		}
		for _, a := range args {
			switch a.Size {
			case 1, 2, 4, 8:
			default:
				t.Fatalf("Parse(%v, %q): size %d", machine, s, a.Size)
			}
			if a.Kind == SIB && a.Scale != 1 && a.Scale != 2 && a.Scale != 4 && a.Scale != 8 {
				t.Fatalf("Parse(%v, %q): scale %d", machine, s, a.Scale)
			}
			if a.Kind == Unsupported && a.Reason == "" {
				t.Fatalf("Parse(%v, %q): unsupported without a reason", machine, s)
			}
		}
		canon := Format(args)
		again, err := Parse(machine, canon)
		if err != nil {
			t.Fatalf("Parse(%v, %q) ok, but its Format %q: %v", machine, s, canon, err)
		}
		if len(again) != len(args) {
			t.Fatalf("Format %q of %q: %d args, want %d", canon, s, len(again), len(args))
		}
		for i := range args {
			want := args[i]
			if want.Kind != Unsupported {
				want.Operand = again[i].Operand
			}
			if !reflect.DeepEqual(again[i], want) {
				t.Fatalf("round trip of %q via %q, arg %d:\n got %#v\nwant %#v", s, canon, i+1, again[i], want)
			}
		}
		if c2 := Format(again); c2 != canon {
			t.Fatalf("Format not idempotent: %q then %q", canon, c2)
		}
	})
}

func machineIndex(m elf.Machine) uint8 {
	for i, s := range supportedMachines {
		if s == m {
			return uint8(i)
		}
	}
	panic("unsupported machine in a test table")
}
