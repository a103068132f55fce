// Command python prints the Python functions a CPython 3.11 process calls,
// indented by call depth, with the time each call took:
//
//	sudo go run ./examples/python -- /usr/bin/python3.11 script.py
//	sudo go run ./examples/python -p PID [-n COUNT] [-python PATH]
//
// With a command, the command is started stopped right after its execve
// (procmaps.Launch), the probes are attached to it, and only then does it run:
// no call is missed, and the tracer exits when the command does (Ctrl-C
// goes to the command; SIGTERM to the tracer is passed on to it). With
// -p, a running process is traced until it exits or Ctrl-C.
//
// It uses two USDT probes that CPython is built with (see
// `probekit list /usr/bin/python3.11`):
//
//	python:function__entry(const char *filename, const char *funcname, int lineno)
//	python:function__return(const char *filename, const char *funcname, int lineno)
//
// The BPF side (pycalls.c) is written in C against probekit's usdt.bpf.h,
// the libbpf-compatible API: BPF_USDT names the probe's arguments, and
// bpf_probe_read_user_str copies the two strings into a ring buffer event.
// It also keeps each thread's stack of open calls in BPF maps: the depth
// per thread id, and each open call's start time and code per thread id
// and depth, so that a return is matched with its entry and carries its
// call's latency.
//
// # CPython 3.11 fires function__entry only while tracing
//
// CPython 3.11's interpreter loop reaches the function__entry probe only
// while a trace or profile function is set (sys.settrace, sys.setprofile):
// it checks its use_tracing flag first (the one exception seen: closing or
// throwing into a generator fires it anyway). An empty profile function is
// enough:
//
//	sudo go run ./examples/python -- /usr/bin/python3.11 -c '
//	import sys; sys.setprofile(lambda *a: None)
//	def f(n): return n and f(n - 1)
//	f(3)'
//
// function__return is not gated that way: it also fires for the calls
// made before the profile function was set (the interpreter's start-up)
// and for the profile function itself, which runs with tracing suspended.
// Those returns match no entry; the BPF side matches each return with the
// innermost open call of its thread (same code) and drops the others
// unless -unmatched is given. -unmatched also shows, with -p, the returns
// of the calls that were running when tracing began. With -p, the process
// must have set a trace or profile function itself.
//
// Use /usr/bin/python3.11 explicitly: python3.11 on PATH may be a wrapper
// (pyenv's shim) that runs another interpreter than the one whose probes
// are attached. Both probes are gated by semaphores, which the attacher
// raises through the kernel; without that, CPython skips them too.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/cilium/ebpf/ringbuf"

	"github.com/probekit/probekit/procmaps"
	"github.com/probekit/probekit/usdt"
)

// defaultPython is Debian's CPython 3.11: a non-PIE executable with
// libpython linked in, so its probes are in the executable itself.
const defaultPython = "/usr/bin/python3.11"

// maxIndent caps the indentation: deep recursion (Python allows 1000
// frames by default) would otherwise push names off the screen.
const maxIndent = 40

func main() {
	log.SetFlags(0)
	log.SetPrefix("python: ")
	pid := flag.Int("p", 0, "trace this running Python process")
	python := flag.String("python", defaultPython, "the CPython 3.11 executable that holds the probes")
	count := flag.Int("n", 0, "stop tracing after `COUNT` lines (0: no limit); a command runs on untraced")
	unmatched := flag.Bool("unmatched", false, "also show returns whose entry was not seen")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: python [-n COUNT] [-python PATH] [-unmatched] (-p PID | -- CMD ARGS...)\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	args := flag.Args()
	if (*pid > 0) == (len(args) > 0) || *pid < 0 || *count < 0 {
		flag.Usage()
		os.Exit(2)
	}
	if os.Geteuid() != 0 {
		log.Fatal("loading BPF programs and attaching uprobes needs root: run with sudo")
	}

	opts := options{Python: *python, PID: *pid, Unmatched: *unmatched}
	if len(args) > 0 {
		opts.Cmd = exec.Command(args[0], args[1:]...)
		opts.Cmd.Stdin, opts.Cmd.Stdout, opts.Cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		if path, err := exec.LookPath(args[0]); err == nil && !sameFile(path, *python) {
			log.Printf("warning: %s is not %s: calls are seen only if it runs %s", path, *python, *python)
		}
	}

	// -p: Ctrl-C or SIGTERM stops the trace (a second one kills the
	// tracer). A command gets Ctrl-C from the terminal itself and decides
	// whether to end (the Python REPL does not), and the tracer ends with
	// it: so the tracer catches SIGINT and does nothing with it (caught,
	// not ignored: an ignored signal would stay ignored in the command),
	// and passes SIGTERM on through ctx.
	stopOn := []os.Signal{os.Interrupt, syscall.SIGTERM}
	if opts.Cmd != nil {
		signal.Notify(make(chan os.Signal, 1), os.Interrupt)
		stopOn = stopOn[1:]
	}
	ctx, stop := signal.NotifyContext(context.Background(), stopOn...)
	context.AfterFunc(ctx, stop)

	// Lines are written when no more calls are waiting, not one write
	// per line: a busy program makes calls faster than lines can be
	// written one at a time.
	out := bufio.NewWriter(os.Stdout)
	lines := 0
	err := trace(ctx, opts, func(c Call, more bool) bool {
		out.WriteString(format(c))
		out.WriteByte('\n')
		lines++
		if !more {
			out.Flush()
		}
		return *count == 0 || lines < *count
	})
	out.Flush()
	if err != nil {
		log.Fatal(err)
	}
}

// options says what to trace: a running process (PID) or a command to
// launch (Cmd), in either case through the probes of the file Python.
type options struct {
	Python string
	PID    int
	Cmd    *exec.Cmd
	// Unmatched reports returns whose entry was not seen.
	Unmatched bool
}

// Call is one function__entry or function__return hit.
type Call struct {
	Return   bool
	PID, TID uint32
	// Depth counts the calls of this thread that were open around this
	// one when tracing saw them: 0 for the outermost. An entry and its
	// return have the same depth.
	Depth    int
	File     string // co_filename: a path, or "<string>" for -c code
	Function string // co_name
	// Line is the function's first line at entry and the line returning
	// at return.
	Line int
	// Latency is the time from entry to return, for a return whose entry
	// was seen (EntrySeen). Returns without an entry are reported only
	// with options.Unmatched.
	Latency   time.Duration
	EntrySeen bool
}

// trace loads the BPF programs, attaches them to the probes in the traced
// process, and passes every call to handle until handle returns false,
// the process exits, or ctx is done. more tells handle whether other calls
// are already waiting. A launched command is sent SIGTERM when ctx is
// done, and waited for in every case (untraced once handle said stop);
// its exit error is returned.
func trace(ctx context.Context, opts options, handle func(c Call, more bool) bool) (err error) {
	// Load: Prepare adapts the spec to this kernel (BPF cookies,
	// uprobe_multi) before the programs are loaded.
	spec, err := loadPycalls()
	if err != nil {
		return err
	}
	if err := usdt.Prepare(spec); err != nil {
		return err
	}
	// A constant of pycalls.c, frozen at load: the verifier prunes the
	// branch not taken.
	if err := spec.Variables[pycallsVarReportUnmatched].Set(opts.Unmatched); err != nil {
		return err
	}
	var objs pycallsObjects
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		return fmt.Errorf("load BPF objects: %w", err)
	}
	defer objs.Close()
	att, err := usdt.NewAttacherWithMaps(spec, objs.BpfUsdtSpecs, objs.BpfUsdtIpToSpecId)
	if err != nil {
		return err
	}

	// Whom to trace. A launched command waits, stopped after its execve,
	// until Finish(nil): any error return before that kills it.
	var (
		proc     *procmaps.Process
		launched *procmaps.Launched
	)
	if opts.Cmd != nil {
		if launched, err = procmaps.Launch(opts.Cmd); err != nil {
			return err
		}
		defer func() { err = launched.Finish(err) }()
		proc = launched.Process
	} else {
		if proc, err = procmaps.Open(opts.PID); err != nil {
			return err
		}
		if err := checkMaps(proc, opts.Python); err != nil {
			return err
		}
	}

	// Attach: each probe in opts.Python as the process sees it, for this
	// process only. The kernel raises the probes' semaphores in it.
	// Returns first: in a running process (-p), an entry seen before its
	// return is attached could stay open forever and shift every later
	// depth of its thread, while a return seen before entries are is
	// merely unmatched.
	ret, err := att.Attach(objs.OnReturn, opts.Python, "python", "function__return", &usdt.Options{Process: proc})
	if err != nil {
		return err
	}
	defer ret.Close()
	entry, err := att.Attach(objs.OnEntry, opts.Python, "python", "function__entry", &usdt.Options{Process: proc})
	if err != nil {
		return err
	}
	defer entry.Close()
	for _, w := range append(ret.Warnings(), entry.Warnings()...) {
		log.Printf("warning: %v", w) // an argument that will read as 0
	}

	rd, err := ringbuf.NewReader(objs.Events)
	if err != nil {
		return err
	}
	defer rd.Close()

	// exited is closed when the traced process is gone.
	exited := make(chan struct{})
	var waitErr error
	// helpers is cancelled when trace returns, and ends the goroutines
	// below; wg.Wait runs after cancel (defers run last-first) and before
	// rd.Close.
	helpers, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	if launched != nil {
		if err := launched.Finish(nil); err != nil {
			return err
		}
		cmd := launched.Cmd
		go func() {
			waitErr = cmd.Wait()
			close(exited)
		}()
		stopCmd := context.AfterFunc(ctx, func() { cmd.Process.Signal(syscall.SIGTERM) })
		defer stopCmd()
	} else {
		wg.Add(1)
		go func() {
			defer wg.Done()
			watchExit(helpers, proc, exited)
		}()
	}
	// When the process is gone or ctx is done, Flush makes the reader
	// hand out what is left in the ring buffer, then ErrFlushed. Every hit
	// of an exited process is in the buffer: the programs ran in its
	// threads, before they exited.
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-exited:
		case <-helpers.Done():
		}
		rd.Flush()
	}()

	err = readCalls(rd, handle)
	if n := lostCount(&objs); n > 0 {
		log.Printf("%d calls not shown: the ring buffer was full (depths and latencies of the others are right)", n)
	}
	if opts.Cmd == nil {
		return err
	}
	if err != nil {
		opts.Cmd.Process.Kill() // the trace is broken: do not leave it running
		<-exited
		return err
	}
	// Detach before waiting, so a command stopped by handle (-n) runs on
	// untraced; Close is idempotent, the deferred calls do nothing then.
	entry.Close()
	ret.Close()
	<-exited
	if waitErr != nil {
		return fmt.Errorf("%s: %w", opts.Cmd.Path, waitErr)
	}
	return nil
}

// readCalls decodes events until handle returns false or the reader is
// flushed.
func readCalls(rd *ringbuf.Reader, handle func(Call, bool) bool) error {
	var rec ringbuf.Record
	for {
		err := rd.ReadInto(&rec)
		if errors.Is(err, ringbuf.ErrFlushed) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read ring buffer: %w", err)
		}
		ev, err := eventOf(rec.RawSample)
		if err != nil {
			return err
		}
		if !handle(callOf(ev), rd.AvailableBytes() > 0) {
			return nil
		}
	}
}

// eventOf reads a ring buffer sample in place as the struct event that
// pycalls.c wrote on this machine: bpf2go generated pycallsEvent with the
// C layout (structs.HostLayout), and ReadInto's buffer is 8-byte aligned.
// binary.Decode would copy it through reflection at about 3 µs per event,
// slower than a busy Python makes calls.
func eventOf(sample []byte) (*pycallsEvent, error) {
	if len(sample) < int(unsafe.Sizeof(pycallsEvent{})) {
		return nil, fmt.Errorf("event of %d bytes, want %d: rebuild pycalls.c (go generate)", len(sample), unsafe.Sizeof(pycallsEvent{}))
	}
	return (*pycallsEvent)(unsafe.Pointer(&sample[0])), nil
}

// callOf converts the BPF event (struct event of pycalls.c).
func callOf(ev *pycallsEvent) Call {
	return Call{
		Return:    ev.Kind == 1, // CALL_RETURN
		PID:       ev.Pid,
		TID:       ev.Tid,
		Depth:     int(ev.Depth),
		File:      cString(ev.Filename[:]),
		Function:  cString(ev.Funcname[:]),
		Line:      int(ev.Lineno),
		Latency:   time.Duration(ev.LatencyNs),
		EntrySeen: ev.EntrySeen != 0,
	}
}

// cString is b up to its first NUL (bpf_probe_read_user_str always
// writes one).
func cString(b []byte) string {
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// lostCount sums the per-CPU count of events the ring buffer refused.
func lostCount(objs *pycallsObjects) uint64 {
	var perCPU []uint64
	if err := objs.Lost.Lookup(uint32(0), &perCPU); err != nil {
		return 0
	}
	var n uint64
	for _, v := range perCPU {
		n += v
	}
	return n
}

// watchExit closes exited when proc has exited (or its PID was reused).
// A process that is not our child cannot be waited for with wait(2);
// procmaps waits on its pidfd.
func watchExit(ctx context.Context, proc *procmaps.Process, exited chan<- struct{}) {
	if proc.WaitExit(ctx) == nil {
		close(exited)
	}
}

// checkMaps fails when proc has not mapped the file at path (as the
// process sees it, inside its container): the probes would be attached,
// but nothing would ever fire.
func checkMaps(proc *procmaps.Process, path string) error {
	f, err := proc.OpenInRoot(path)
	if err != nil {
		return err
	}
	defer f.Close()
	id, err := procmaps.IDOf(fmt.Sprintf("/proc/self/fd/%d", f.Fd()))
	if err != nil {
		return err
	}
	objs, err := proc.Objects()
	if err != nil {
		return err
	}
	for _, o := range objs {
		if o.ID() == id {
			return nil
		}
	}
	return fmt.Errorf("pid %d does not run %s (it has not mapped it): pass the interpreter it runs with -python", proc.PID, path)
}

// format renders a call as one line:
//
//	PID[/TID]  <indent>-> file:function:line
//	PID[/TID]  <indent><- file:function:line  latency
//
// The TID is shown for threads other than the main one, whose calls
// interleave with the main thread's.
func format(c Call) string {
	var b strings.Builder
	who := strconv.FormatUint(uint64(c.PID), 10)
	if c.TID != c.PID {
		who += "/" + strconv.FormatUint(uint64(c.TID), 10)
	}
	fmt.Fprintf(&b, "%-7s ", who)
	if c.Depth > maxIndent {
		fmt.Fprintf(&b, "[%d]", c.Depth)
	}
	b.WriteString(strings.Repeat("  ", min(c.Depth, maxIndent)))
	arrow := "->"
	if c.Return {
		arrow = "<-"
	}
	fmt.Fprintf(&b, "%s %s:%s:%d", arrow, c.File, c.Function, c.Line)
	switch {
	case !c.Return:
	case c.EntrySeen:
		fmt.Fprintf(&b, "  %s", formatLatency(c.Latency))
	default:
		b.WriteString("  (entry not seen)")
	}
	return b.String()
}

// formatLatency rounds d to three significant digits: 1.23µs, 45.6ms.
func formatLatency(d time.Duration) string {
	unit := time.Nanosecond
	for limit := time.Microsecond; d >= limit; limit *= 10 {
		unit *= 10
	}
	return d.Round(unit).String()
}

// sameFile reports whether a and b name the same file (symlinks
// followed).
func sameFile(a, b string) bool {
	sa, err := os.Stat(a)
	if err != nil {
		return false
	}
	sb, err := os.Stat(b)
	return err == nil && os.SameFile(sa, sb)
}
