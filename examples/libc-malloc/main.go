// Command libc-malloc counts the sizes a process passes to libc's malloc
// for a few seconds, then prints the most frequent ones.
//
//	sudo go run ./examples/libc-malloc -p PID [-d 5s] [-n 20]
//
// It finds the libc the process maps in /proc/PID/maps, opens it through
// /proc/PID/root (so a containerised process works), and attaches a small
// BPF program, written with cilium/ebpf's asm package so that no clang is
// needed, that counts malloc's first argument (RDI on x86-64) in a hash
// map.
package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/probekit/probekit/uprobe"
)

// ptRegsRDI is the offset of rdi (malloc's size argument) in x86-64
// struct pt_regs (arch/x86/include/uapi/asm/ptrace.h).
const ptRegsRDI = 112

// maxSizes bounds the distinct sizes counted; later ones are dropped.
const maxSizes = 4096

func main() {
	pid := flag.Int("p", 0, "process to trace (required)")
	dur := flag.Duration("d", 5*time.Second, "how long to count")
	top := flag.Int("n", 20, "sizes to print")
	flag.Parse()
	if *pid <= 0 {
		flag.Usage()
		os.Exit(2)
	}
	if runtime.GOARCH != "amd64" {
		log.Fatalf("this example reads x86-64 registers; GOARCH is %s", runtime.GOARCH)
	}
	if err := run(*pid, *dur, *top); err != nil {
		log.Fatal(err)
	}
}

func run(pid int, dur time.Duration, top int) error {
	libc, err := libcPath(pid)
	if err != nil {
		return err
	}
	bin, err := uprobe.OpenProcess(pid, libc)
	if err != nil {
		return err
	}
	defer bin.Close()

	counts, err := ebpf.NewMap(&ebpf.MapSpec{
		Name: "malloc_sizes", Type: ebpf.Hash, KeySize: 8, ValueSize: 8, MaxEntries: maxSizes,
	})
	if err != nil {
		return fmt.Errorf("create map: %w", err)
	}
	defer counts.Close()

	spec := countArgProgram(counts)
	cs := &ebpf.CollectionSpec{Programs: map[string]*ebpf.ProgramSpec{"count_arg": spec}}
	if err := uprobe.Prepare(cs, "count_arg"); err != nil {
		return err
	}
	prog, err := ebpf.NewProgram(spec)
	if err != nil {
		return fmt.Errorf("load program: %w", err)
	}
	defer prog.Close()

	l, err := bin.Entry("malloc", prog, nil)
	if err != nil {
		return err
	}
	defer l.Close()

	fmt.Printf("counting malloc sizes of pid %d in %s for %s\n", pid, libc, dur)
	time.Sleep(dur)

	type entry struct{ size, n uint64 }
	var all []entry
	var size, n uint64
	it := counts.Iterate()
	for it.Next(&size, &n) {
		all = append(all, entry{size, n})
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read map: %w", err)
	}
	slices.SortFunc(all, func(a, b entry) int { return cmp.Or(cmp.Compare(b.n, a.n), cmp.Compare(a.size, b.size)) })
	fmt.Printf("%12s %10s\n", "SIZE", "CALLS")
	for i, e := range all {
		if i == top {
			break
		}
		fmt.Printf("%12d %10d\n", e.size, e.n)
	}
	return nil
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

// libcPath returns the libc path in pid's /proc/PID/maps.
func libcPath(pid int) (string, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		// address perms offset dev inode path
		if len(fields) == 6 && strings.Contains(fields[5], "/libc.so") {
			return fields[5], nil
		}
	}
	return "", errors.New("the process maps no libc (static binary?)")
}
