package tracer_test

import (
	"context"
	"fmt"
	"os"
	"os/signal"

	"github.com/probekit/probekit/probe"
	"github.com/probekit/probekit/record"
	"github.com/probekit/probekit/tracer"
)

// Python's function calls, handed to Go as they happen. Arguments are
// numbered from 1, as on the command line (--str 1,2).
func ExampleRun() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	spec, err := probe.Parse("python3.11:python:function__entry")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	err = tracer.Run(ctx, &tracer.Config{
		Probes: []probe.Spec{spec},
		// CPython fires function__entry for each call only while a
		// profile function is set.
		Command: []string{"python3.11", "-c", "import sys; sys.setprofile(lambda *a: None); import json"},
		Strs:    []probe.ArgNum{probe.Arg(1), probe.Arg(2)}, // file, function as strings
		OnHit: func(h *tracer.Hit) error {
			name, _ := h.Str(probe.Arg(2)) // the function's name
			fmt.Printf("%s %d %s\n", h.Site.Label, h.PID, name)
			return nil
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
}

// The calls counted in the kernel by function name, printed as a table
// when the command exits.
func ExampleRun_count() {
	spec, _ := probe.Parse("python3.11:python:function__entry")
	keys, err := tracer.ParseKeys("str 2")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	err = tracer.Run(context.Background(), &tracer.Config{
		Probes:  []probe.Spec{spec},
		Command: []string{"python3.11", "-c", "import json"},
		Mode:    record.ModeCount,
		Keys:    keys,
		Top:     10,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
}

// A handle to a running trace: Start returns with the probes attached in
// the process, the workload runs, Counts reads the kernel's counts while
// the trace goes on, and Stop detaches. Nothing is printed: a Go program
// sets no output field.
func ExampleStart() {
	proc, err := tracer.OpenProcess(os.Getppid())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	spec, _ := probe.Parse("uprobe:libc.so.6:malloc")
	tr, err := tracer.Start(context.Background(), &tracer.Config{
		Probes:  []probe.Spec{spec},
		Process: proc,
		Mode:    record.ModeCount,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	// ... the workload: every malloc call from here on is counted.
	counts, _ := tr.Counts()
	if err := tr.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	for _, c := range counts {
		fmt.Println(c.Probe, c.Hits)
	}
}
