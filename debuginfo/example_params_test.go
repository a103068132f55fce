package debuginfo_test

import (
	"debug/elf"
	"fmt"
	"log"
	"os"

	"github.com/probekit/probekit/debuginfo"
)

// The parameters of a function at its entry, in a program built with
// gcc -O0: its DWARF places them in the function's own frame, written by
// the prologue, so their entry locations come from the calling convention.
func ExampleSignatures_At() {
	f, err := os.Open("../testdata/params/bin/params_O0")
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	sigs, err := debuginfo.OpenSignaturesFile(f)
	if err != nil {
		log.Fatal(err)
	}
	const emit = 0x1139 // nm params_O0 | grep ' emit'
	sig, err := sigs.At(emit)
	if err != nil {
		log.Fatal(err)
	}
	for _, p := range sig.Params {
		pc := p.Loc.Pieces[0]
		fmt.Printf("%s: %s, %d bytes, %s %s (from the ABI: %v)\n", p.Name, p.Type.Name, p.Type.Size,
			pc.Kind, debuginfo.RegisterName(elf.EM_X86_64, pc.Reg), p.Loc.FromABI)
	}
	// Output:
	// i: int, 4 bytes, register rdi (from the ABI: true)
	// name: const char *, 8 bytes, register rsi (from the ABI: true)
}
