// Command libc-malloc counts the sizes passed to libc's malloc, then prints
// the most frequent ones:
//
//	go run ./examples/libc-malloc -p PID [-d 5s] [-n 20]
//	go run ./examples/libc-malloc [-n 20] -- CMD ARGS...
//
// It teaches one thing: a uprobe on a library function named by the
// library's name. uprobe.OpenProcess(proc, "libc.so.6") finds the libc the
// process maps (or, for a command stopped before its dynamic loader ran,
// the one in its library directories), inside the process's root, so a
// containerised process works. The BPF program, written with cilium/ebpf's
// asm package so that no clang is needed, counts malloc's first argument
// (RDI on x86-64) in a hash map: nothing crosses to user space per call.
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/probekit/probekit/procmaps"
	"github.com/probekit/probekit/uprobe"
)

// ptRegsRDI is the offset of rdi (malloc's size argument) in x86-64
// struct pt_regs (arch/x86/include/uapi/asm/ptrace.h).
const ptRegsRDI = 112

// maxSizes bounds the distinct sizes counted; later ones are dropped.
const maxSizes = 4096

func main() {
	log.SetFlags(0)
	pid := flag.Int("p", 0, "process to trace")
	dur := flag.Duration("d", 5*time.Second, "how long to count a process (-p)")
	top := flag.Int("n", 20, "sizes to print")
	flag.Parse()
	if (*pid > 0) == (flag.NArg() > 0) {
		flag.Usage()
		os.Exit(2)
	}
	if runtime.GOARCH != "amd64" {
		log.Fatalf("this example reads x86-64 registers; GOARCH is %s", runtime.GOARCH)
	}
	var cmd *exec.Cmd
	ctx := context.Background()
	if flag.NArg() > 0 {
		cmd = exec.Command(flag.Arg(0), flag.Args()[1:]...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	} else {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *dur)
		defer cancel()
	}
	sizes, err := count(ctx, *pid, cmd)
	if err != nil {
		log.Print(err)
	}
	type entry struct{ size, n uint64 }
	var all []entry
	for size, n := range sizes {
		all = append(all, entry{size, n})
	}
	slices.SortFunc(all, func(a, b entry) int { return cmp.Or(cmp.Compare(b.n, a.n), cmp.Compare(a.size, b.size)) })
	fmt.Printf("%12s %10s\n", "SIZE", "CALLS")
	for _, e := range all[:min(*top, len(all))] {
		fmt.Printf("%12d %10d\n", e.size, e.n)
	}
}

// count counts malloc's sizes in process pid until ctx ends or it exits,
// or, with cmd, in cmd launched for the purpose until it exits; it returns
// the counts (also on error: cmd's exit status).
func count(ctx context.Context, pid int, cmd *exec.Cmd) (sizes map[uint64]uint64, err error) {
	counts, err := ebpf.NewMap(&ebpf.MapSpec{
		Name: "malloc_sizes", Type: ebpf.Hash, KeySize: 8, ValueSize: 8, MaxEntries: maxSizes,
	})
	if err != nil {
		return nil, fmt.Errorf("create map: %w", err)
	}
	defer counts.Close()
	spec := countArgProgram(counts)
	cs := &ebpf.CollectionSpec{Programs: map[string]*ebpf.ProgramSpec{"count_arg": spec}}
	if err := uprobe.Prepare(cs, "count_arg"); err != nil { // before load
		return nil, err
	}
	prog, err := ebpf.NewProgram(spec)
	if err != nil {
		return nil, fmt.Errorf("load program: %w", err)
	}
	defer prog.Close()

	var proc *procmaps.Process
	var l *procmaps.Launched
	if cmd != nil {
		if l, err = procmaps.Launch(cmd); err != nil { // stopped after execve
			return nil, err
		}
		defer func() { err = l.Finish(err) }() // killed on every error return
		proc = l.Process
	} else if proc, err = procmaps.Open(pid); err != nil {
		return nil, err
	}
	// By the library's name, as the process sees it; probes fire in that
	// process only.
	libc, err := uprobe.OpenProcess(proc, "libc.so.6")
	if err != nil {
		return nil, err
	}
	defer libc.Close()
	lk, err := libc.Entry("malloc", prog, nil)
	if err != nil {
		return nil, err
	}
	defer lk.Close()

	if l != nil {
		if err := l.Finish(nil); err != nil { // now it runs
			return nil, err
		}
		err = cmd.Wait()
	} else if proc.WaitExit(ctx) == nil {
		err = fmt.Errorf("pid %d exited", pid)
	}
	sizes = make(map[uint64]uint64)
	var size, n uint64
	it := counts.Iterate()
	for it.Next(&size, &n) {
		sizes[size] = n
	}
	return sizes, cmp.Or(err, it.Err())
}

// countArgProgram returns a uprobe program that does counts[rdi]++.
func countArgProgram(counts *ebpf.Map) *ebpf.ProgramSpec {
	return &ebpf.ProgramSpec{
		Name:    "count_malloc",
		Type:    ebpf.Kprobe,
		License: "Dual MIT/GPL",
		Instructions: asm.Instructions{
			asm.LoadMem(asm.R1, asm.R1, ptRegsRDI, asm.DWord),
			asm.StoreMem(asm.RFP, -8, asm.R1, asm.DWord), // key: the size
			asm.LoadMapPtr(asm.R1, counts.FD()),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, -8),
			asm.FnMapLookupElem.Call(),
			asm.JNE.Imm(asm.R0, 0, "count"),
			// New size: insert 1 (NOEXIST; if another CPU inserted first,
			// its count stands and this hit is lost, acceptable here).
			asm.Mov.Imm(asm.R1, 1),
			asm.StoreMem(asm.RFP, -16, asm.R1, asm.DWord),
			asm.LoadMapPtr(asm.R1, counts.FD()),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, -8),
			asm.Mov.Reg(asm.R3, asm.RFP),
			asm.Add.Imm(asm.R3, -16),
			asm.Mov.Imm(asm.R4, 1), // BPF_NOEXIST
			asm.FnMapUpdateElem.Call(),
			asm.Ja.Label("out"),
			asm.Mov.Imm(asm.R1, 1).WithSymbol("count"),
			asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
			asm.Mov.Imm(asm.R0, 0).WithSymbol("out"),
			asm.Return(),
		},
	}
}
