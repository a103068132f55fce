// Command malloc-profile counts a process's malloc calls and bytes by
// call stack, in the kernel, and writes them as a pprof profile (and,
// with -folded, in the folded format of flamegraph.pl):
//
//	go run ./examples/malloc-profile -p PID [-d 5s] [-o malloc.pprof] [-folded]
//	go tool pprof -top malloc.pprof
//
// It teaches one thing: whole stacks counted in the kernel, made a
// profile. The BPF program (mallocprof.c) calls unwind.bpf.h's
// probekit_cfi_count_user_stack at malloc's entry with the size as the
// value: the stack is unwound inside BPF from the call-frame
// information of the process's objects, so code built without frame
// pointers (Debian's libc, most -O2 C) keeps its callers apart, and no
// event crosses to user space per call. Package bpfunwind builds the
// tables from the objects' .eh_frame and owns the maps the program
// walks with (Tables.Prepare, Replacements, Add). After the duration,
// bpfunwind.ReadCounts reads each distinct stack with its count and
// bytes, and package profile names them while the process lives.
//
// The CFI walk is x86-64's; elsewhere the program walks by frame
// pointers (stack.bpf.h's probekit_count_user_stack, read back with
// bpf.ReadStackCounts).
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"runtime"
	"time"

	"github.com/cilium/ebpf"
	"github.com/probekit/probekit/bpfunwind"
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

// cfi: the program unwinds by CFI (x86-64, see mallocprof.c).
const cfi = runtime.GOARCH == "amd64"

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
	// The walk's tables: the program takes their maps in place of its
	// own.
	var tables *bpfunwind.Tables
	opts := &ebpf.CollectionOptions{}
	if cfi {
		if tables, err = bpfunwind.New(nil); err != nil {
			return nil, err
		}
		defer tables.Close()
		if err := tables.Prepare(spec); err != nil {
			return nil, err
		}
		opts.MapReplacements = tables.Replacements()
	}
	var objs mallocprofObjects
	if err := spec.LoadAndAssign(&objs, opts); err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	defer objs.Close()
	proc, err := procmaps.Open(pid)
	if err != nil {
		return nil, err
	}
	if tables != nil {
		// The tables of the objects it maps now (Add again after a
		// dlopen).
		if err := tables.Add(proc); err != nil {
			return nil, err
		}
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

	var counted []bpf.CountedStack
	if cfi {
		cs, err := bpfunwind.ReadCounts(objs.Stacks, objs.Counts)
		if err != nil {
			return nil, err
		}
		for _, c := range cs {
			counted = append(counted, c.CountedStack)
		}
	} else if counted, err = bpf.ReadStackCounts(objs.Stacks, objs.Counts); err != nil {
		return nil, err
	}
	stacks := make([]profile.Stack, len(counted))
	for i, c := range counted {
		stacks[i] = profile.Stack{PID: c.PID, Frames: c.Stack, Count: c.Count, Sum: c.Sum}
	}
	return profile.Build(stacks, profile.NewProcesses(nil),
		&profile.Options{CountName: "calls", SumName: "bytes", SumUnit: "bytes"})
}
