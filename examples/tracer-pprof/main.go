// Command tracer-pprof writes a pprof profile of a command's malloc
// calls, counted by whole user stack in the kernel, with package tracer:
//
//	sudo go run ./examples/tracer-pprof -o malloc.pprof -- CMD ARGS...
//	go tool pprof -traces malloc.pprof
//
// Config.Stack with record.ModeCount counts by stack (Config.Complete
// adds the stack key), CFI unwinds through code built without frame
// pointers (x86-64), and Pprof names the file written at the end.
package main

import (
	"context"
	"flag"
	"log"
	"os"
	"os/signal"

	"github.com/probekit/probekit/probe"
	"github.com/probekit/probekit/record"
	"github.com/probekit/probekit/tracer"
)

func main() {
	out := flag.String("o", "malloc.pprof", "the profile to write")
	flag.Parse()
	if flag.NArg() == 0 {
		log.Fatal("usage: tracer-pprof [-o FILE] -- CMD [ARGS...]")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := profileMallocs(ctx, flag.Args(), *out); err != nil {
		log.Fatal(err)
	}
}

// profileMallocs runs cmd and writes its malloc calls by stack to out.
func profileMallocs(ctx context.Context, cmd []string, out string) error {
	return tracer.Run(ctx, &tracer.Config{
		Probes:  []probe.Spec{{Kind: record.KindUprobe, Target: "libc.so.6", Func: "malloc"}},
		Command: cmd,
		// libc is mapped after the exec: followed, it is attached as the
		// command maps it, which a kernel without BPF cookies needs.
		Follow: true,
		Mode:   record.ModeCount,
		Stack:  true,
		Pprof:  out,
	})
}
