// Command tracer-calls counts a Python program's function calls by file
// and function, in Go, with package tracer and Config.OnHit:
//
//	sudo go run ./examples/tracer-calls -- python3.11 app.py
//
// CPython fires python:function__entry for every call only while a
// profile or trace function is set: app.py calls sys.setprofile (see
// docs/runtimes.md). Arguments are numbered from 1, as `--str 1,2`.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"

	"github.com/probekit/probekit/probe"
	"github.com/probekit/probekit/record"
	"github.com/probekit/probekit/tracer"
)

func main() {
	flag.Parse()
	if flag.NArg() == 0 {
		log.Fatal("usage: tracer-calls -- python3.11 SCRIPT [ARGS...]")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	calls, err := count(ctx, flag.Args())
	if err != nil {
		log.Fatal(err)
	}
	for f, n := range calls {
		fmt.Printf("%8d %s\n", n, f)
	}
}

// count runs cmd, a Python interpreter and its arguments, and counts its
// calls by "file:function".
func count(ctx context.Context, cmd []string) (map[string]int, error) {
	calls := map[string]int{}
	err := tracer.Run(ctx, &tracer.Config{
		Probes:  []probe.Spec{{Kind: record.KindUSDT, Target: cmd[0], Provider: "python", Name: "function__entry"}},
		Command: cmd,
		Strs:    []probe.ArgNum{probe.Arg(1), probe.Arg(2)}, // file, function
		OnHit: func(h *tracer.Hit) error {
			file, _ := h.Str(probe.Arg(1))
			function, _ := h.Str(probe.Arg(2))
			calls[string(file)+":"+string(function)]++
			return nil
		},
	})
	return calls, err
}
