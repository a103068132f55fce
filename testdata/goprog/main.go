// Command goprog is the Go fixture of probekit's uprobe tests: a few
// functions with several return paths, a recursive one that grows the
// goroutine stack, all driven over stdin so that every call happens after
// the test has attached its probes.
//
//	goprog prints   "ready PID"
//	test writes     "add N"        add(i, 2*i+1) for i in [0, N), then "done"
//	test writes     "classify N"   classify(v) for N values cycling through
//	                               {-5, 0, 7, 5000}, then "done"
//	test writes     "recurse D N"  N times recurse(D, 0): D nested frames of
//	                               ~1 KiB each, so the stack is copied
//	                               several times, then "done"
//	test writes     "load G N D"   G goroutines, each N rounds of add,
//	                               classify and recurse(D), then "done"
//	test writes     "quit" or EOF  exit 0
//
// Each function is //go:noinline so that it exists as a symbol with its
// own entry and RET instructions.
package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"sync"
)

// add has one return path. Go's register ABI on amd64 passes a in RAX and
// b in RBX and returns the sum in RAX.
//
//go:noinline
func add(a, b int) int {
	return a + b
}

// classify has four return paths, each compiled to its own RET.
//
//go:noinline
func classify(v int) int {
	if v < 0 {
		return -1
	}
	if v == 0 {
		return 0
	}
	if v > 1000 {
		return 2
	}
	return 1
}

// pair returns two results (RAX, RBX on amd64).
//
//go:noinline
func pair(a, b int) (int, int) {
	if a > b {
		return b, a
	}
	return a, b
}

// recurse burns ~1 KiB of stack per frame, so a deep call forces the
// runtime to copy (move) the goroutine stack while probes are attached.
//
//go:noinline
func recurse(depth int, acc int) int {
	var pad [128]int
	pad[depth%len(pad)] = depth
	if depth == 0 {
		return acc + pad[0]
	}
	return recurse(depth-1, acc+pad[depth%len(pad)]%3)
}

var classifyInputs = [...]int{-5, 0, 7, 5000}

func run(cmd string, args []int) error {
	switch {
	case cmd == "add" && len(args) == 1:
		for i := 0; i < args[0]; i++ {
			sink += add(i, 2*i+1)
		}
	case cmd == "classify" && len(args) == 1:
		for i := 0; i < args[0]; i++ {
			sink += classify(classifyInputs[i%len(classifyInputs)])
		}
	case cmd == "pair" && len(args) == 1:
		for i := 0; i < args[0]; i++ {
			x, y := pair(i, 10)
			sink += x - y
		}
	case cmd == "recurse" && len(args) == 2:
		for i := 0; i < args[1]; i++ {
			sink += recurse(args[0], 0)
		}
	case cmd == "load" && len(args) == 3:
		var wg sync.WaitGroup
		for g := 0; g < args[0]; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s := 0
				for i := 0; i < args[1]; i++ {
					s += add(i, g)
					s += classify(classifyInputs[i%len(classifyInputs)])
					s += recurse(args[2], g)
				}
				mu.Lock()
				sink += s
				mu.Unlock()
			}()
		}
		wg.Wait()
	default:
		return fmt.Errorf("bad command %q %v", cmd, args)
	}
	return nil
}

var (
	mu   sync.Mutex
	sink int
)

func main() {
	fmt.Printf("ready %d\n", os.Getpid())
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		fields := strings.Fields(in.Text())
		if len(fields) == 0 {
			continue
		}
		if fields[0] == "quit" {
			break
		}
		args := make([]int, 0, len(fields)-1)
		for _, f := range fields[1:] {
			var v int
			if _, err := fmt.Sscan(f, &v); err != nil {
				fmt.Printf("error %v\n", err)
				continue
			}
			args = append(args, v)
		}
		if err := run(fields[0], args); err != nil {
			fmt.Printf("error %v\n", err)
		}
		fmt.Println("done")
	}
}
