// Command malloc-profile counts a process's malloc calls and bytes by
// call stack, in the kernel, and writes them as a pprof profile (and,
// with -folded, in the folded format of flamegraph.pl):
//
//	sudo go run ./examples/malloc-profile -p PID [-d 5s] [-o malloc.pprof] [-folded]
//	go tool pprof -top malloc.pprof
//
// It teaches one thing: stacks counted in the kernel, made a profile.
// The BPF program (mallocprof.c) calls stack.bpf.h's
// probekit_count_user_stack at malloc's entry with the size as the
// value: no event crosses to user space per call. After the duration,
// bpf.ReadStackCounts reads each distinct stack with its count and
// bytes, and package profile names them while the process lives.
//
// The kernel walks the stack by frame pointers: frames of code built
// without them (Debian's libc, most -O2 C) end the walk early; package
// unwind and probekit_copy_stack give whole stacks at the cost of a
// stack copy per call.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/probekit/probekit/procmaps"
	"github.com/probekit/probekit/profile"
	"github.com/probekit/probekit/uprobe"
	"github.com/probekit/probekit/usdt/bpf"
)

func main() {
	log.SetFlags(0)
	pid := flag.Int("p", 0, "process to profile")
	dur := flag.Duration("d", 5*time.Second, "how long to count")
	out := flag.String("o", "malloc.pprof", "pprof file to write")
	folded := flag.Bool("folded", false, "also print the folded stacks")
	flag.Parse()
	if *pid <= 0 {
		flag.Usage()
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *dur)
	defer cancel()
	p, err := run(ctx, *pid, nil)
	if err != nil {
		log.Fatal(err)
	}
	f, err := os.Create(*out)
	if err != nil {
		log.Fatal(err)
	}
	if err := p.Write(f); err != nil {
		log.Fatal(err)
	}
	if err := f.Close(); err != nil {
		log.Fatal(err)
	}
	if *folded {
		profile.WriteFolded(os.Stdout, p)
	}
}

// run counts malloc's stacks in process pid until ctx ends, then builds
// the profile; attached, if not nil, is called once the probe is.
func run(ctx context.Context, pid int, attached func()) (*profile.Profile, error) {
	spec, err := loadMallocprof()
	if err != nil {
		return nil, err
	}
	if err := uprobe.Prepare(spec, "malloc_stack"); err != nil {
		return nil, err
	}
	var objs mallocprofObjects
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	defer objs.Close()
	proc, err := procmaps.Open(pid)
	if err != nil {
		return nil, err
	}
	libc, err := uprobe.OpenProcess(proc, "libc.so.6")
	if err != nil {
		return nil, err
	}
	defer libc.Close()
	l, err := libc.Entry("malloc", objs.MallocStack, nil)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	if attached != nil {
		attached()
	}
	<-ctx.Done()

	counted, err := bpf.ReadStackCounts(objs.Stacks, objs.Counts)
	if err != nil {
		return nil, err
	}
	stacks := make([]profile.Stack, len(counted))
	for i, c := range counted {
		stacks[i] = profile.Stack{PID: c.PID, Frames: c.Stack, Count: c.Count, Sum: c.Sum}
	}
	return profile.Build(stacks, profile.NewProcesses(nil),
		&profile.Options{CountName: "calls", SumName: "bytes", SumUnit: "bytes"})
}
