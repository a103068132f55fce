package uprobe_test

import (
	"fmt"
	"log"

	"github.com/probekit/probekit/debuginfo"
	"github.com/probekit/probekit/uprobe"
)

// A function's parameters from DWARF, and where each is at its entry: what
// a tracer's BPF program reads there. params_stripped has no DWARF of its
// own; its debug file, next to it, is found by its .gnu_debuglink.
func ExampleBinary_Params() {
	b, err := uprobe.Open("../testdata/params/bin/params_stripped")
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	fn, err := b.Function("byval")
	if err != nil {
		log.Fatal(err)
	}
	sig, err := b.Params(fn)
	if err != nil {
		log.Fatal(err)
	}
	for _, p := range sig.Params {
		fmt.Printf("%s %s (%d bytes):", p.Type.Name, p.Name, p.Type.Size)
		for _, pc := range p.Loc.Pieces {
			switch pc.Kind {
			case debuginfo.PieceReg:
				fmt.Printf(" %s", debuginfo.RegisterName(b.Machine(), pc.Reg))
			case debuginfo.PieceStack:
				fmt.Printf(" CFA%+d", pc.Offset)
			}
		}
		fmt.Println()
	}
	fmt.Printf("returns %s\n", sig.Results[0].Type.Name)
	// Output:
	// struct point pt (8 bytes): rdi
	// struct big b (24 bytes): CFA+0
	// double d (8 bytes): xmm0
	// char * buf (8 bytes): rsi
	// returns long
}
