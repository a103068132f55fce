// Command tracer-live counts probes in a running process with
// tracer.Start, printing the counts while the trace runs, and detaches
// with Stop at Ctrl-C:
//
//	sudo go run ./examples/tracer-live -p PID -i 1s uprobe:libc.so.6:malloc
//
// Start returns once every probe is attached, so what the process does
// from then on is counted; nothing is printed but what this program
// prints (a Go program sets no output field of tracer.Config).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/probekit/probekit/probe"
	"github.com/probekit/probekit/record"
	"github.com/probekit/probekit/tracer"
)

func main() {
	pid := flag.Int("p", 0, "the process to trace")
	every := flag.Duration("i", time.Second, "how often to print the counts")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	tr, err := start(ctx, *pid, flag.Args())
	if err != nil {
		log.Fatal(err)
	}
	if err := report(ctx, tr, *every, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// start counts probes (probekit trace's PROBE form) in process pid, and
// returns with them attached.
func start(ctx context.Context, pid int, probes []string) (*tracer.Trace, error) {
	proc, err := tracer.OpenProcess(pid)
	if err != nil {
		return nil, err
	}
	var specs []probe.Spec
	for _, p := range probes {
		s, err := probe.Parse(p)
		if err != nil {
			return nil, err
		}
		specs = append(specs, s)
	}
	return tracer.Start(ctx, &tracer.Config{Probes: specs, Process: proc, Mode: record.ModeCount})
}

// report prints tr's counts every interval until ctx is done or the
// process exits, then stops the trace and prints the final counts.
func report(ctx context.Context, tr *tracer.Trace, every time.Duration, w io.Writer) error {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			if err := print(tr, w); err != nil {
				tr.Stop()
				return err
			}
			continue
		case <-ctx.Done():
		case <-tr.Done():
		}
		if err := tr.Stop(); err != nil {
			return err
		}
		return print(tr, w)
	}
}

// print writes a line per probe: its count, then its name.
func print(tr *tracer.Trace, w io.Writer) error {
	counts, err := tr.Counts()
	for _, c := range counts {
		fmt.Fprintf(w, "%10d %s\n", c.Hits, c.Probe)
	}
	return err
}
