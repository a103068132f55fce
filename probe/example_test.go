package probe_test

import (
	"fmt"

	"github.com/probekit/probekit/probe"
)

// PROBE as the command line writes it.
func ExampleParse() {
	for _, s := range []string{"python3.11:python:function__entry", "uprobe:libc.so.6:malloc", "uretprobe:libc.so.6:malloc"} {
		p, err := probe.Parse(s)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Printf("%s in %s\n", p.Label(), p.Target)
	}
	// Output:
	// python:function__entry in python3.11
	// uprobe:malloc in libc.so.6
	// uretprobe:malloc in libc.so.6
}

// Arguments are numbered from 1, as `--str 1` and the YAML's `arg: 1`;
// Index is the 0-based position in a record's values.
func ExampleArg() {
	for _, a := range []probe.ArgNum{probe.Arg(1), probe.Arg(3), probe.Ret(), probe.Arg(0)} {
		fmt.Printf("%s: index %d, check %v\n", a, a.Index(), a.Check())
	}
	// Output:
	// arg 1: index 0, check <nil>
	// arg 3: index 2, check <nil>
	// ret: index 0, check <nil>
	// arg 0: index -1, check argument 0: arguments are numbered from 1 (probe.Arg(1) is the first)
}
