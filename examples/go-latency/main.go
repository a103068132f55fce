// Command go-latency measures how long a function of a Go program takes,
// call by call, and prints the latencies as a log2 histogram:
//
//	sudo go run ./examples/go-latency main.handle -- ./server -addr :8080
//	sudo go run ./examples/go-latency -p PID [-d 10s] [-unit us] main.handle
//	sudo go run ./examples/go-latency -bin ./server main.handle
//
// With a command, the command is started stopped right after its execve
// (procmaps.Launch), the probes are attached for its PID, and it runs; the
// histogram is printed when it exits. With -p (one process) or -bin
// (every process running the file), it is printed on Ctrl-C, or after -d.
// Stripped binaries (go build -ldflags=-s) work: their functions are read
// from .gopclntab.
//
// # Return probes on Go: RET sites, never uretprobes
//
// A kernel uretprobe works by replacing the return address on the stack
// with the address of a trampoline. The Go runtime reads return addresses
// itself: when a goroutine's stack grows it is copied and every frame is
// walked, and so it is for panics, tracebacks and the garbage collector's
// stack scans. A return address pointing into the kernel's trampoline is
// not Go code, and the runtime aborts the program ("unexpected return
// pc", golang/go#22008). So a uretprobe on a Go function crashes the
// program the first time such a walk meets it, and uprobe's Uretprobe
// refuses Go binaries (ErrGoUretprobe).
//
// go-latency uses uprobe's Return instead, which on a Go binary decodes the
// function and puts an ordinary uprobe on each of its RET instructions:
// nothing on the stack is changed. The return program runs just before
// the RET.
//
// # Pairing entries with returns
//
// Go functions run on goroutines, which move between threads, so a thread
// id does not pair an entry with its return; the goroutine does. On amd64
// Go's internal register ABI keeps the current goroutine's runtime.g in
// R14 (arm64: R28) whenever Go code runs, at the entry and at every RET,
// and the BPF programs (golat.c) read it from the registers the uprobe
// saved (pt_regs.r14, offset 8 on x86-64). The call key is that g plus
// the frame's distance from the top of the goroutine's stack (g.stack.hi
// minus the stack pointer), which tells recursive calls apart and stays
// the same when the runtime copies the stack to grow it.
//
// Entry probes fire once per call: uprobe.Entry places them after the
// function's stack check. At the first instruction they would fire again
// whenever runtime.morestack grows the stack or preempts the goroutine and
// restarts the function. Should an entry still repeat (a prologue the
// uprobe package does not recognise, or Options.FunctionStart), it finds
// its call already open at the same key and keeps the first start time;
// such entries are counted as Restarts. Returns fire once per call, so
// the count of calls is the count of returns. A call that never returns
// (a panic unwinds through it) would stay open and be taken for a restart
// of the next call at the same depth of the same goroutine.
//
// Output (the fixture testdata/bin/goprog_stripped, whose recurse calls
// itself 200 deep):
//
//	main.recurse in testdata/bin/goprog_stripped (pid 29601): 256 calls, avg 2.476949ms
//	               usecs : count    distribution
//	             8 -> 15 : 6        |***                                     |
//	            16 -> 31 : 0        |                                        |
//	           ...
//	        2048 -> 4095 : 65       |*************************************   |
//	        4096 -> 8191 : 69       |****************************************|
//
// A latency includes the cost of the probes themselves: two uprobe hits
// per call, a few microseconds each (an int3 trap into the kernel; see
// measured.md), and for a recursive function those of every nested call.
//
// The BPF side is golat.c (C, built by bpf2go: see gen.go).
package main

import (
	"context"
	"debug/elf"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cilium/ebpf"

	"github.com/probekit/probekit/procmaps"
	"github.com/probekit/probekit/uprobe"
)

// histSlots mirrors HIST_SLOTS of golat.c: slot 0 holds latencies of 0,
// slot i > 0 those in [2^(i-1), 2^i) units.
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

// histWidth is the width of the widest bar of the histogram, in stars.
const histWidth = 40

// units are the histogram units -unit accepts.
var units = map[string]time.Duration{"ns": time.Nanosecond, "us": time.Microsecond, "ms": time.Millisecond}

func main() {
	log.SetFlags(0)
	log.SetPrefix("go-latency: ")
	pid := flag.Int("p", 0, "measure in this running process")
	bin := flag.String("bin", "", "measure in every process running this Go `binary`")
	dur := flag.Duration("d", 0, "stop after this long (0: at Ctrl-C, or when the command or process exits)")
	unit := flag.String("unit", "ns", "histogram unit: ns, us or ms")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: go-latency [-d DURATION] [-unit ns|us|ms] (-p PID | -bin BINARY) FUNCTION\n"+
			"       go-latency [-d DURATION] [-unit ns|us|ms] FUNCTION -- CMD ARGS...\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	args := flag.Args()
	opts := options{PID: *pid, Binary: *bin, Unit: units[*unit]}
	if len(args) >= 3 && args[1] == "--" {
		opts.Cmd = exec.Command(args[2], args[3:]...)
		opts.Cmd.Stdin, opts.Cmd.Stdout, opts.Cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		args = args[:1]
	}
	targets := 0
	for _, set := range []bool{*pid > 0, *bin != "", opts.Cmd != nil} {
		if set {
			targets++
		}
	}
	if len(args) != 1 || targets != 1 || *pid < 0 || opts.Unit == 0 {
		flag.Usage()
		os.Exit(2)
	}
	opts.Function = args[0]
	if os.Geteuid() != 0 {
		log.Fatal("loading BPF programs and attaching uprobes needs root: run with sudo")
	}
	if opts.Cmd != nil {
		// The command gets Ctrl-C from the terminal and the histogram is
		// printed when it exits: catch SIGINT and do nothing with it.
		signal.Notify(make(chan os.Signal, 1), os.Interrupt)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *dur > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *dur)
		defer cancel()
	}
	opts.Attached = func(a Attachment) {
		log.Printf("measuring %s in %s: return probes on %d RET site(s); Ctrl-C to stop", opts.Function, a.Where, a.ReturnSites)
	}

	res, err := measure(ctx, opts)
	if res != nil {
		res.Print(os.Stdout)
	}
	if err != nil {
		log.Fatal(err)
	}
}

// options says what to measure: Function in a running process (PID),
// in every process running Binary, or in a command to launch (Cmd).
type options struct {
	Function string
	PID      int
	Binary   string
	Cmd      *exec.Cmd
	// Unit of the histogram; 0 means nanoseconds.
	Unit time.Duration
	// Attached, if set, is called once the probes are in place (before
	// a launched command runs).
	Attached func(Attachment)
}

// Attachment describes the probes of a measurement.
type Attachment struct {
	// PID is the process measured, 0 for every process running the file.
	PID int
	// Where names the binary (and process).
	Where string
	// ReturnSites is the number of RET instructions probed.
	ReturnSites int
}

// Result is a measurement.
type Result struct {
	Function string
	Where    string
	Unit     time.Duration
	// Hist[0] counts latencies of 0 units, Hist[i] those in
	// [2^(i-1), 2^i) units.
	Hist [histSlots]uint64
	// Calls counts returns: exactly one per call that returned while
	// the probes were attached.
	Calls uint64
	// Matched counts the returns whose entry was seen: the calls in the
	// histogram.
	Matched uint64
	// Entries counts entry hits, Restarts the ones that found their call
	// already open (an entry probe the stack check does not precede).
	Entries, Restarts uint64
	// Sum of the matched latencies, in Unit.
	Sum uint64
	// Open is the number of calls entered and not returned when the
	// measurement ended.
	Open int
}

// measure attaches the probes, waits until ctx is done or the measured
// process exits, and returns the histogram. A launched command is sent
// SIGTERM when ctx is done and is waited for; its exit error is returned
// with the result.
func measure(ctx context.Context, opts options) (res *Result, err error) {
	if opts.Unit == 0 {
		opts.Unit = time.Nanosecond
	}
	var (
		bin      *uprobe.Binary
		launched *procmaps.Launched
		pid      = opts.PID
	)
	switch {
	case opts.Cmd != nil:
		// The binary is opened before the command starts: a failure then
		// leaves nothing to clean up.
		if bin, err = uprobe.Open(opts.Cmd.Path); err != nil {
			return nil, err
		}
	case pid > 0:
		// /proc/PID/exe is the file the process runs, wherever it is
		// (a container, a deleted file); its inode is what the probes
		// attach to.
		if bin, err = uprobe.Open(fmt.Sprintf("/proc/%d/exe", pid)); err != nil {
			return nil, err
		}
	default:
		if bin, err = uprobe.Open(opts.Binary); err != nil {
			return nil, err
		}
	}
	defer bin.Close()
	if err := checkGo(bin); err != nil {
		return nil, err
	}
	fn, err := bin.Function(opts.Function)
	if err != nil {
		return nil, err
	}
	scan, err := bin.ReturnSites(fn)
	if err != nil {
		return nil, err
	}
	rets, _ := scan.Returns()

	spec, err := loadGolat()
	if err != nil {
		return nil, err
	}
	if err := uprobe.Prepare(spec); err != nil {
		return nil, err
	}
	if err := spec.Variables[golatVarUnitNs].Set(uint64(opts.Unit)); err != nil {
		return nil, err
	}
	var objs golatObjects
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		return nil, fmt.Errorf("load BPF objects: %w", err)
	}
	defer objs.Close()

	if opts.Cmd != nil {
		if launched, err = procmaps.Launch(opts.Cmd); err != nil {
			return nil, err
		}
		// Kills the command on every error return before Finish(nil).
		defer func() { err = launched.Finish(err) }()
		pid = launched.Cmd.Process.Pid
	}

	// Returns first, then entries: an entry seen without its return
	// would stay open; a return without an entry is only not matched.
	// Return on a Go binary is RET-site uprobes, never a uretprobe.
	ret, err := bin.Return(fn.Name, objs.OnReturn, &uprobe.Options{PID: pid})
	if err != nil {
		return nil, err
	}
	defer ret.Close()
	entry, err := bin.Entry(fn.Name, objs.OnEntry, &uprobe.Options{PID: pid})
	if err != nil {
		return nil, err
	}
	defer entry.Close()

	where := bin.Path()
	if pid > 0 {
		where = fmt.Sprintf("%s (pid %d)", where, pid)
	}
	if opts.Cmd != nil {
		where = fmt.Sprintf("%s (pid %d)", opts.Cmd.Path, pid)
	}
	if opts.Attached != nil {
		opts.Attached(Attachment{PID: pid, Where: where, ReturnSites: len(rets)})
	}

	var runErr error
	switch {
	case launched != nil:
		if err := launched.Finish(nil); err != nil {
			return nil, err
		}
		cmd := launched.Cmd
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case runErr = <-done:
		case <-ctx.Done():
			cmd.Process.Signal(syscall.SIGTERM)
			runErr = <-done
		}
		if runErr != nil {
			runErr = fmt.Errorf("%s: %w", cmd.Path, runErr)
		}
	case pid > 0:
		proc, err := procmaps.Open(pid)
		if err != nil {
			return nil, err
		}
		waitExit(ctx, proc)
	default:
		<-ctx.Done()
	}

	// Detach before reading, so the numbers are final.
	if err := errors.Join(entry.Close(), ret.Close()); err != nil {
		return nil, err
	}
	if res, err = collect(&objs); err != nil {
		return nil, err
	}
	res.Function, res.Where, res.Unit = fn.Name, where, opts.Unit
	return res, runErr
}

// checkGo refuses what golat.c cannot pair: native code (no g register)
// and a binary of another architecture than the BPF object built for
// this one.
func checkGo(bin *uprobe.Binary) error {
	if !bin.IsGo() {
		return fmt.Errorf("%s is not a Go program: go-latency pairs calls by goroutine (for native code use a uretprobe, as examples/node-fs does)", bin.Path())
	}
	want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[runtime.GOARCH]
	if bin.Machine() != want {
		return fmt.Errorf("%s is a %s binary; this go-latency reads %s registers", bin.Path(), bin.Machine(), runtime.GOARCH)
	}
	return nil
}

// collect sums the per-CPU histogram and counters and counts the calls
// left open.
func collect(objs *golatObjects) (*Result, error) {
	var res Result
	var perCPU []uint64
	sum := func(m *ebpf.Map, key uint32) (uint64, error) {
		if err := m.Lookup(key, &perCPU); err != nil {
			return 0, fmt.Errorf("read %s[%d]: %w", m, key, err)
		}
		var n uint64
		for _, v := range perCPU {
			n += v
		}
		return n, nil
	}
	for i := range res.Hist {
		n, err := sum(objs.Hist, uint32(i))
		if err != nil {
			return nil, err
		}
		res.Hist[i] = n
	}
	var counts [numCounters]uint64
	for i := range counts {
		n, err := sum(objs.Counts, uint32(i))
		if err != nil {
			return nil, err
		}
		counts[i] = n
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
		avg = (time.Duration(r.Sum) * r.Unit / time.Duration(r.Matched)).String()
	}
	fmt.Fprintf(w, "%s in %s: %d calls, avg %s\n", r.Function, r.Where, r.Calls, avg)
	if r.Matched != r.Calls {
		fmt.Fprintf(w, "(%d calls were already running when the probes were attached: not in the histogram)\n", r.Calls-r.Matched)
	}
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
	unit := map[time.Duration]string{time.Nanosecond: "nsecs", time.Microsecond: "usecs", time.Millisecond: "msecs"}[r.Unit]
	fmt.Fprintf(w, "%20s : %-8s %s\n", unit, "count", "distribution")
	for i := first; i <= last; i++ {
		lo, hi := slotRange(i)
		stars := int(r.Hist[i] * histWidth / most)
		fmt.Fprintf(w, "%20s : %-8d |%-*s|\n", lo+" -> "+hi, r.Hist[i], histWidth, strings.Repeat("*", stars))
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

// waitExit returns when proc has exited (or its PID was reused) or ctx
// is done. A process that is not our child cannot be waited for with
// wait(2); procmaps waits on its pidfd.
func waitExit(ctx context.Context, proc *procmaps.Process) {
	proc.WaitExit(ctx)
}
