// Command goparams is the Go fixture of probekit's named arguments: a Go
// program built with DWARF, whose functions' parameters are in Go's
// register ABI (ABIInternal) at entry, as its DWARF location lists say.
//
//	goparams N   N rounds; round r calls
//	             emit(r, "gopher", &pt, 7, true)    pt = point{3, -4}
//	                                                 returns r + 6
//	             greet(r)                           returns "hello" for an
//	                                                 even r, "bye" for an odd
//	             then exits 0
//
// emit and greet are //go:noinline so that each exists as a function of
// its own.
package main

import (
	"fmt"
	"os"
	"strconv"
)

type point struct {
	X, Y int
}

var sink int

//go:noinline
func emit(i int, name string, p *point, u uint8, ok bool) int {
	if ok {
		sink += int(u) + p.X
	}
	return i + len(name)
}

var greetings = [...]string{"hello", "bye"}

//go:noinline
func greet(r int) string {
	return greetings[r%2]
}

func main() {
	rounds := 1
	if len(os.Args) > 1 {
		n, err := strconv.Atoi(os.Args[1])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		rounds = n
	}
	pt := &point{3, -4}
	name := string([]byte("gopher"))
	for r := 0; r < rounds; r++ {
		sink += emit(r, name, pt, 7, true)
		sink += len(greet(r))
	}
}
