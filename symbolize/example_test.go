package symbolize_test

import (
	"fmt"

	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/symbolize"
)

// Link-time addresses of a file, as nm prints them.
func ExampleSymbolizer_File() {
	s := symbolize.New(nil)
	f, err := s.File(testkit.Fixture("usdt_sample"))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, fr := range f.Symbolize([]uint64{0x10d5, 0x14f0}) {
		fmt.Printf("%#x %s+%#x\n", fr.Address, fr.Function, fr.Offset)
	}
	// Output:
	// 0x10d5 main+0x5
	// 0x14f0 fire_consts+0x0
}
