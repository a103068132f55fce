// Command go-latency measures how long a function of a Go program takes,
// call by call, and prints the latencies as a log2 histogram when the
// program exits:
//
//	go run ./examples/go-latency main.handle -- ./server -addr :8080
//
// It teaches one thing: return probes on Go functions. A kernel uretprobe
// replaces the return address on the stack with a trampoline's; the Go
// runtime walks return addresses when it grows a goroutine's stack, panics
// or scans stacks for the garbage collector, and aborts on one outside Go
// code ("unexpected return pc", golang/go#22008). So uprobe's Return, on a
// Go binary, decodes the function and puts an ordinary uprobe on each RET
// instruction instead: nothing on the stack changes, and the program runs
// just before the RET. Stripped binaries (-ldflags=-s) work: functions
// come from .gopclntab.
//
// Goroutines move between threads, so golat.c pairs an entry with its
// return by goroutine: Go's register ABI keeps the current g in R14 on
// amd64 (R28 on arm64) at entry and at every RET. The key is g plus the
// frame's distance from the top of the goroutine's stack, which tells
// recursive calls apart and survives the runtime copying the stack. Entry
// probes sit after the function's stack check, so they fire once per
// call; an entry that still repeats keeps the first start (Restarts).
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf"

	"github.com/probekit/probekit/procmaps"
	"github.com/probekit/probekit/uprobe"
)

// histSlots mirrors HIST_SLOTS of golat.c: slot 0 holds latencies of 0 ns,
// slot i > 0 those in [2^(i-1), 2^i) ns.
const histSlots = 65

// Counter indexes of golat.c's counts map.
const (
	countReturns = iota
	countMatched
	countEntries
	countRestarts
	countSum
	numCounters
)

func main() {
	log.SetFlags(0)
	log.SetPrefix("go-latency: ")
	if len(os.Args) < 4 || os.Args[2] != "--" {
		log.Fatal("usage: go-latency FUNCTION -- CMD ARGS...")
	}
	cmd := exec.Command(os.Args[3], os.Args[4:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	signal.Notify(make(chan os.Signal, 1), os.Interrupt) // Ctrl-C is the command's
	res, err := measure(context.Background(), os.Args[1], cmd)
	if res != nil {
		res.Print(os.Stdout)
	}
	if err != nil {
		log.Fatal(err)
	}
}

// Result is a measurement.
type Result struct {
	Function string
	// Hist[0] counts latencies of 0 ns, Hist[i] those in [2^(i-1), 2^i) ns.
	Hist [histSlots]uint64
	// Calls counts returns, Matched those whose entry was seen (the calls
	// in the histogram), Entries the entry hits, Restarts those that found
	// their call already open. Sum adds the matched latencies, in ns.
	Calls, Matched, Entries, Restarts, Sum uint64
	// Open counts the calls entered and not returned at the end.
	Open int
}

// measure launches cmd stopped, attaches to function fn of its executable,
// lets it run and returns the histogram when it exits, with its exit error.
func measure(ctx context.Context, fn string, cmd *exec.Cmd) (res *Result, err error) {
	bin, err := uprobe.Open(cmd.Path)
	if err != nil {
		return nil, err
	}
	defer bin.Close()
	if !bin.IsGo() {
		return nil, fmt.Errorf("%s is not a Go program: calls are paired by goroutine (native code takes a uretprobe, as examples/node-fs does)", cmd.Path)
	}
	spec, err := loadGolat()
	if err != nil {
		return nil, err
	}
	if err := uprobe.Prepare(spec); err != nil { // before load: uprobe_multi
		return nil, err
	}
	var objs golatObjects
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		return nil, fmt.Errorf("load BPF objects: %w", err)
	}
	defer objs.Close()

	l, err := procmaps.Launch(cmd) // stopped after its execve
	if err != nil {
		return nil, err
	}
	defer func() { err = l.Finish(err) }() // killed on every error return
	// Returns first: an entry whose return is not probed would stay open.
	// Return on a Go binary is a uprobe on each RET, never a uretprobe.
	opts := &uprobe.Options{PID: l.Process.PID}
	ret, err := bin.Return(fn, objs.OnReturn, opts)
	if err != nil {
		return nil, err
	}
	defer ret.Close()
	entry, err := bin.Entry(fn, objs.OnEntry, opts)
	if err != nil {
		return nil, err
	}
	defer entry.Close()

	if err := l.Finish(nil); err != nil { // now it runs
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { cmd.Process.Kill() })
	defer stop()
	runErr := cmd.Wait()
	if res, err = collect(&objs); err != nil {
		return nil, err
	}
	res.Function = fn
	return res, runErr
}

// collect sums the per-CPU histogram and counters and counts the calls
// left open.
func collect(objs *golatObjects) (*Result, error) {
	var res Result
	var counts [numCounters]uint64
	var perCPU []uint64
	for _, m := range []struct {
		m   *ebpf.Map
		out []uint64
	}{{objs.Hist, res.Hist[:]}, {objs.Counts, counts[:]}} {
		for i := range m.out {
			if err := m.m.Lookup(uint32(i), &perCPU); err != nil {
				return nil, fmt.Errorf("read %s[%d]: %w", m.m, i, err)
			}
			for _, v := range perCPU {
				m.out[i] += v
			}
		}
	}
	res.Calls, res.Matched, res.Entries, res.Restarts, res.Sum =
		counts[countReturns], counts[countMatched], counts[countEntries], counts[countRestarts], counts[countSum]
	var key golatCallKey
	var val golatOpenCall
	it := objs.Starts.Iterate()
	for it.Next(&key, &val) {
		res.Open++
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read open calls: %w", err)
	}
	return &res, nil
}

// Print writes the summary line and the histogram, from the first to the
// last non-empty slot.
func (r *Result) Print(w io.Writer) {
	avg := "-"
	if r.Matched > 0 {
		avg = (time.Duration(r.Sum) / time.Duration(r.Matched)).String()
	}
	fmt.Fprintf(w, "%s: %d calls, avg %s\n", r.Function, r.Calls, avg)
	first, last := -1, -1
	var most uint64
	for i, n := range r.Hist {
		if n == 0 {
			continue
		}
		if first < 0 {
			first = i
		}
		last = i
		most = max(most, n)
	}
	if first < 0 {
		return
	}
	fmt.Fprintf(w, "%20s : %-8s %s\n", "nsecs", "count", "distribution")
	for i := first; i <= last; i++ {
		lo, hi := slotRange(i)
		stars := int(r.Hist[i] * 40 / most)
		fmt.Fprintf(w, "%20s : %-8d |%-*s|\n", lo+" -> "+hi, r.Hist[i], 40, strings.Repeat("*", stars))
	}
}

// slotRange returns the inclusive bounds of histogram slot i.
func slotRange(i int) (lo, hi string) {
	if i == 0 {
		return "0", "0"
	}
	l := uint64(1) << (i - 1)
	return strconv.FormatUint(l, 10), strconv.FormatUint(2*l-1, 10)
}
