// Command node-fs prints the file-system calls a Node.js command makes,
// with their paths or descriptors, results and durations:
//
//	go run ./examples/node-fs -- node app.js
//
// It teaches one thing: probes on many functions of a library through one
// attachment. Every fs.* call of Node (fs.openSync, fs.readFile, require()
// reading a module) ends in one of libuv's uv_fs_* functions, which node
// exports (nm -D /usr/bin/node). Node has no USDT probes since v19, so
// function probes are the way in. Binary.Functions("uv_fs_*") lists them;
// Entries and Returns attach one program to each of those fsFunctions
// knows, as one uprobe_multi link each where the kernel has it, and
// Options.FunctionCookie tells the entry program (nodefs.c) which
// function it is in: which arguments are paths and where the callback is.
//
// uv_fs_X(loop, req, ...) is synchronous when its callback is NULL (the
// fs.*Sync functions, module loading): it returns a descriptor, a byte
// count, 0 or a negative errno. With a callback it only queues the work
// and returns 0, printed "queued".
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/probekit/probekit/procmaps"
	"github.com/probekit/probekit/uprobe"
)

// Cookie bits, as nodefs.c reads them; fd3 is the Go side's own.
const (
	cookieStr3  = 1 << 8  // argument 3 is a path
	cookieStr4  = 1 << 9  // argument 4 is a path
	cookieBufs4 = 1 << 10 // argument 4 is uv_buf_t[argument 5]
	fd3         = 1 << 11 // argument 3 is a descriptor
)

// fsFunctions are the functions traced (libuv 1.x include/uv.h): what
// their arguments after loop and req are, and the 1-based position of
// their callback.
var fsFunctions = []struct {
	name string
	args uint64
	cb   int
}{
	{"uv_fs_open", cookieStr3, 6}, // path, flags, mode, cb
	{"uv_fs_close", fd3, 4},
	{"uv_fs_read", fd3 | cookieBufs4, 7}, // fd, bufs, nbufs, offset, cb
	{"uv_fs_write", fd3 | cookieBufs4, 7},
	{"uv_fs_stat", cookieStr3, 4},
	{"uv_fs_lstat", cookieStr3, 4},
	{"uv_fs_fstat", fd3, 4},
	{"uv_fs_access", cookieStr3, 5}, // path, mode, cb
	{"uv_fs_unlink", cookieStr3, 4},
	{"uv_fs_mkdir", cookieStr3, 5}, // path, mode, cb
	{"uv_fs_rmdir", cookieStr3, 4},
	{"uv_fs_rename", cookieStr3 | cookieStr4, 5},
	{"uv_fs_realpath", cookieStr3, 4},
	{"uv_fs_readlink", cookieStr3, 4},
}

// cookieOf is the attach cookie of function i: its index, argument kinds
// and callback position.
func cookieOf(i int) uint64 {
	return uint64(i)<<32 | fsFunctions[i].args | uint64(fsFunctions[i].cb)
}

func main() {
	log.SetFlags(0)
	if len(os.Args) < 3 || os.Args[1] != "--" {
		log.Fatal("usage: node-fs -- node SCRIPT ARGS...")
	}
	cmd := exec.Command(os.Args[2], os.Args[3:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	signal.Notify(make(chan os.Signal, 1), os.Interrupt) // Ctrl-C is the command's
	fmt.Printf("%-8s %-15s %-40s %-13s %s\n", "PID", "FUNCTION", "ARGUMENTS", "RESULT", "TIME")
	if err := trace(context.Background(), cmd, func(c Call) { fmt.Println(format(c)) }); err != nil {
		log.Fatal(err)
	}
}

// Call is one uv_fs_* call that returned.
type Call struct {
	PID         uint32
	Function    string
	Path, Path2 string // path arguments, "" if none
	FD          int    // descriptor argument, -1 if none
	Flags       int    // uv_fs_open's flags
	Bytes       uint64 // the buffers' size, for uv_fs_read and uv_fs_write
	Async       bool   // a callback was given: Result says queued or not
	Result      int
	Latency     time.Duration
}

// trace launches cmd stopped, attaches to the uv_fs_* functions of its
// executable for it alone, lets it run, and passes each call to handle
// until it exits; it returns cmd's exit error.
func trace(ctx context.Context, cmd *exec.Cmd, handle func(Call)) (err error) {
	// nodefs.c reads each function's cookie: without cookies its
	// program would not load.
	if err := uprobe.CheckCookies(); err != nil {
		return fmt.Errorf("node-fs: %w", err)
	}
	spec, err := loadNodefs()
	if err != nil {
		return err
	}
	if err := uprobe.Prepare(spec); err != nil { // before load: uprobe_multi
		return err
	}
	var objs nodefsObjects
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		return fmt.Errorf("load BPF objects: %w", err)
	}
	defer objs.Close()

	l, err := procmaps.Launch(cmd) // stopped after its execve
	if err != nil {
		return err
	}
	defer func() { err = l.Finish(err) }() // killed on every error return
	bin, err := uprobe.OpenProcess(l.Process, cmd.Path)
	if err != nil {
		return err
	}
	defer bin.Close()
	index := map[string]int{}
	for i, f := range fsFunctions {
		index[f.name] = i
	}
	var fns []uprobe.Function
	for _, fn := range bin.Functions("uv_fs_*") {
		if _, ok := index[fn.Name]; ok {
			fns = append(fns, fn)
		}
	}
	if len(fns) == 0 {
		return fmt.Errorf("%s exports none of libuv's uv_fs_* functions", cmd.Path)
	}
	// Returns first, so that no entry waits for a return not yet probed.
	ret, err := bin.Returns(fns, objs.OnReturn, nil)
	if err != nil {
		return err
	}
	defer ret.Close()
	entry, err := bin.Entries(fns, objs.OnEntry, &uprobe.Options{
		FunctionCookie: func(fn uprobe.Function) uint64 { return cookieOf(index[fn.Name]) },
	})
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
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait(); rd.Flush() }() // its calls are all in the buffer
	stop := context.AfterFunc(ctx, func() { cmd.Process.Kill() })
	defer stop()

	var rec ringbuf.Record
	for {
		err := rd.ReadInto(&rec)
		if errors.Is(err, ringbuf.ErrFlushed) {
			return <-exited
		}
		// In place: nodefsEvent has the C layout; the buffer is aligned.
		var ev *nodefsEvent
		if err == nil && len(rec.RawSample) >= int(unsafe.Sizeof(nodefsEvent{})) {
			ev = (*nodefsEvent)(unsafe.Pointer(&rec.RawSample[0]))
		}
		if err == nil && (ev == nil || int(ev.Func) >= len(fsFunctions)) {
			err = fmt.Errorf("event of %d bytes not of this nodefs.c: rebuild it (go generate)", len(rec.RawSample))
		}
		if err != nil {
			cmd.Process.Kill()
			<-exited
			return err
		}
		handle(callOf(ev))
	}
}

// callOf decodes an event with its function's layout.
func callOf(ev *nodefsEvent) Call {
	f := fsFunctions[ev.Func]
	c := Call{
		PID: ev.Pid, Function: f.name, FD: -1, Bytes: ev.Bytes, Async: ev.Async != 0,
		Result: int(ev.Ret), Latency: time.Duration(ev.LatencyNs),
	}
	if f.args&cookieStr3 != 0 {
		c.Path = cString(ev.Path[:])
	}
	if f.args&cookieStr4 != 0 {
		c.Path2 = cString(ev.Path2[:])
	}
	if f.args&fd3 != 0 {
		c.FD = int(int32(ev.Args[0]))
	}
	if f.name == "uv_fs_open" {
		c.Flags = int(int32(ev.Args[1]))
	}
	return c
}

// format is one output line.
func format(c Call) string {
	var args []string
	for _, p := range []string{c.Path, c.Path2} {
		if p != "" {
			args = append(args, strconv.Quote(p))
		}
	}
	if c.FD >= 0 {
		args = append(args, "fd "+strconv.Itoa(c.FD))
	}
	if c.Function == "uv_fs_open" {
		args = append(args, fmt.Sprintf("flags %#o", c.Flags))
	}
	if c.Bytes > 0 {
		args = append(args, strconv.FormatUint(c.Bytes, 10)+" bytes")
	}
	res := "= " + strconv.Itoa(c.Result)
	switch {
	case c.Result < 0:
		res += " " + unix.ErrnoName(syscall.Errno(-c.Result))
	case c.Async:
		res = "queued"
	}
	return fmt.Sprintf("%-8d %-15s %-40s %-13s %v", c.PID, c.Function, strings.Join(args, " "), res, c.Latency)
}

// cString is b up to its first NUL.
func cString(b []byte) string {
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}
