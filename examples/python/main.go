// Command python prints the Python functions a CPython 3.11 command calls,
// indented by call depth, with the time each call took:
//
//	go run ./examples/python -- /usr/bin/python3.11 script.py
//
// It teaches one thing: USDT probes guarded by semaphores. CPython is built
// with
//
//	python:function__entry(const char *filename, const char *funcname, int lineno)
//	python:function__return(const char *filename, const char *funcname, int lineno)
//
// and skips both unless their semaphores are raised; the attacher raises
// them in the traced process through the kernel (the uprobe's ref_ctr_offset,
// Linux 4.20). pycalls.c keeps each thread's stack of open calls in BPF maps,
// so a return is matched with its entry and carries its latency.
//
// CPython 3.11 also fires function__entry only while a trace or profile
// function is set: the traced script calls sys.setprofile(lambda *a: None)
// (docs/runtimes.md). function__return fires regardless, so the returns of
// calls made before that match no entry and are dropped in BPF.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/probekit/probekit/procmaps"
	"github.com/probekit/probekit/usdt"
)

// python is Debian's CPython 3.11, whose probes are in the executable
// (libpython is linked in). Name it by path: python3.11 on PATH may be a
// wrapper (pyenv's shim) that runs another interpreter.
const python = "/usr/bin/python3.11"

// ringBytes sizes the ring buffer (a power of 2, at least a page): about
// 36,000 events of 232 bytes between two reads.
var ringBytes uint32 = 8 << 20

func main() {
	log.SetFlags(0)
	if len(os.Args) < 3 || os.Args[1] != "--" {
		log.Fatal("usage: python -- /usr/bin/python3.11 SCRIPT ARGS...")
	}
	cmd := exec.Command(os.Args[2], os.Args[3:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	// Ctrl-C goes to the command, which decides whether to end; the
	// tracer ends with it. Caught, not ignored: an ignored signal would
	// stay ignored in the command.
	signal.Notify(make(chan os.Signal, 1), os.Interrupt)
	err := trace(context.Background(), cmd, func(c Call) { fmt.Println(format(c)) })
	var lost *LostError
	if errors.As(err, &lost) {
		// Said, never silent; the exit status stays the command's.
		fmt.Fprintln(os.Stderr, "python:", lost)
		err = errors.Unwrap(err)
	}
	if err != nil {
		log.Fatal(err)
	}
}

// LostError says how many calls were not printed because the ring buffer
// was full: the program made calls faster than the tracer read them.
// Err is the command's own exit error, or nil.
type LostError struct {
	Calls uint64
	Err   error
}

func (e *LostError) Error() string {
	return fmt.Sprintf("%d entries and returns not printed: the ring buffer was full (the program called faster than this tracer reads)", e.Calls)
}

func (e *LostError) Unwrap() error { return e.Err }

// Call is one function__entry or function__return hit.
type Call struct {
	Return   bool
	PID, TID uint32
	Depth    int    // open calls of this thread around this one
	File     string // co_filename
	Function string // co_name
	Line     int    // the def line at entry, the returning line at return
	Latency  time.Duration
}

// trace launches cmd stopped, attaches to its probes, lets it run, and
// passes every call to handle until it exits; it returns cmd's exit error,
// inside a *LostError when calls did not fit in the ring buffer.
func trace(ctx context.Context, cmd *exec.Cmd, handle func(Call)) (err error) {
	spec, err := loadPycalls()
	if err != nil {
		return err
	}
	spec.Maps["events"].MaxEntries = ringBytes
	if err := usdt.Prepare(spec); err != nil { // before load: cookies, uprobe_multi
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

	l, err := procmaps.Launch(cmd) // stopped after its execve
	if err != nil {
		return err
	}
	defer func() { err = l.Finish(err) }() // killed on every error return
	// Returns first: an entry seen before its return is attached would
	// stay open. The kernel raises each probe's semaphore in the process.
	opts := &usdt.Options{Process: l.Process}
	ret, err := att.Attach(objs.OnReturn, python, "python", "function__return", opts)
	if err != nil {
		return err
	}
	defer ret.Close()
	entry, err := att.Attach(objs.OnEntry, python, "python", "function__entry", opts)
	if err != nil {
		return err
	}
	defer entry.Close()
	rd, err := ringbuf.NewReader(objs.Events)
	if err != nil {
		return err
	}
	defer rd.Close()

	if err := l.Finish(nil); err != nil { // now it runs
		return err
	}
	// Every hit of the process is in the ring buffer once it exited:
	// the programs ran in its threads. Flush hands out the rest, then
	// ErrFlushed.
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait(); rd.Flush() }()
	stop := context.AfterFunc(ctx, func() { cmd.Process.Kill() })
	defer stop()

	var rec ringbuf.Record
	for {
		err := rd.ReadInto(&rec)
		if errors.Is(err, ringbuf.ErrFlushed) {
			return lostError(objs.Lost, <-exited)
		}
		if err == nil && len(rec.RawSample) < int(unsafe.Sizeof(pycallsEvent{})) {
			err = fmt.Errorf("event of %d bytes: rebuild pycalls.c (go generate)", len(rec.RawSample))
		}
		if err != nil {
			cmd.Process.Kill()
			<-exited
			return err
		}
		// In place: bpf2go gave pycallsEvent the C layout, and
		// ReadInto's buffer is 8-byte aligned.
		handle(callOf((*pycallsEvent)(unsafe.Pointer(&rec.RawSample[0]))))
	}
}

// lostError wraps exitErr in a *LostError when the per-CPU counter of
// events that found the ring buffer full is not zero.
func lostError(lost *ebpf.Map, exitErr error) error {
	var perCPU []uint64
	if err := lost.Lookup(uint32(0), &perCPU); err != nil {
		return errors.Join(exitErr, fmt.Errorf("read the lost-event count: %w", err))
	}
	var n uint64
	for _, v := range perCPU {
		n += v
	}
	if n == 0 {
		return exitErr
	}
	return &LostError{Calls: n, Err: exitErr}
}

func callOf(ev *pycallsEvent) Call {
	return Call{
		Return:   ev.Kind == 1, // CALL_RETURN
		PID:      ev.Pid,
		TID:      ev.Tid,
		Depth:    int(ev.Depth),
		File:     cString(ev.Filename[:]),
		Function: cString(ev.Funcname[:]),
		Line:     int(ev.Lineno),
		Latency:  time.Duration(ev.LatencyNs),
	}
}

// cString is b up to its first NUL.
func cString(b []byte) string {
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// format renders a call as "PID  -> file:function:line" at entry and
// "PID  <- file:function:line  latency" at return, indented by depth.
func format(c Call) string {
	indent := strings.Repeat("  ", min(c.Depth, 40))
	if c.Return {
		return fmt.Sprintf("%-7d %s<- %s:%s:%d  %v", c.PID, indent, c.File, c.Function, c.Line, c.Latency)
	}
	return fmt.Sprintf("%-7d %s-> %s:%s:%d", c.PID, indent, c.File, c.Function, c.Line)
}
