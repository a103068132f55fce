package usdt_test

import (
	"fmt"
	"log"

	"github.com/probekit/probekit/usdt"
)

// List the probes of the x86-64 fixture with their locations and
// arguments.
func ExampleOpen() {
	f, err := usdt.Open("../testdata/bin/usdt_sample")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(f.Machine, f.Class)
	for _, p := range f.Probes {
		l := p.Locations[0]
		fmt.Printf("%s: %d location(s), %d arg(s), semaphore=%v, site=%v\n",
			p.String(), len(p.Locations), len(l.Args), l.Semaphore != 0, l.Site)
	}
	// Output:
	// EM_X86_64 ELFCLASS64
	// sample:mem: 1 location(s), 4 arg(s), semaphore=false, site=nop
	// sample:sib: 1 location(s), 2 arg(s), semaphore=false, site=nop
	// sample:loop: 1 location(s), 4 arg(s), semaphore=false, site=nop
	// sample:inlined: 3 location(s), 2 arg(s), semaphore=false, site=nop
	// sample:global: 1 location(s), 2 arg(s), semaphore=false, site=nop
	// sample:consts: 1 location(s), 5 arg(s), semaphore=false, site=nop
	// sample:twelve: 1 location(s), 12 arg(s), semaphore=false, site=nop
	// sample:sizes: 1 location(s), 8 arg(s), semaphore=false, site=nop
	// sample:zero: 1 location(s), 0 arg(s), semaphore=false, site=nop
	// sample:sema: 1 location(s), 2 arg(s), semaphore=true, site=nop
}

// Find one probe and the file offsets a uprobe needs.
func ExampleFile_Find() {
	f, err := usdt.Open("../testdata/bin/usdt_sample")
	if err != nil {
		log.Fatal(err)
	}
	p, err := f.Find("sample", "sema")
	if err != nil {
		log.Fatal(err)
	}
	l := p.Locations[0]
	fmt.Printf("%s at %#x, file offset %#x, semaphore file offset %#x\n", p.String(), l.Address, l.FileOffset, l.SemaphoreOffset)
	fmt.Println(l.ArgsSpec)
	for _, a := range l.Args {
		fmt.Printf("  %d bytes signed=%v %v %s\n", a.Size, a.Signed, a.Kind, a.Reg.Name)
	}
	// Output:
	// sample:sema at 0x1a95, file offset 0x1a95, semaphore file offset 0x3058
	// -8@%rdi -8@%rdx
	//   8 bytes signed=true reg rdi
	//   8 bytes signed=true reg rdx
}

// Match probes with a glob.
func ExampleFile_Match() {
	f, err := usdt.Open("../testdata/bin/usdt_sample")
	if err != nil {
		log.Fatal(err)
	}
	for _, p := range f.Match("sample:s*") {
		fmt.Println(p.String())
	}
	// Output:
	// sample:sib
	// sample:sizes
	// sample:sema
}
