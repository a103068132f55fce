// Command node-fs prints the file-system calls a Node.js process makes,
// with their arguments, results and durations, through uprobes on the
// libuv functions Node is built on:
//
//	sudo go run ./examples/node-fs -- node app.js
//	sudo go run ./examples/node-fs -p PID [-n COUNT]
//
// Every fs.* call of Node (fs.openSync, fs.readFile, fs.promises.stat,
// require() reading a module, ...) ends in one of libuv's uv_fs_*
// functions, which node exports (nm -D /usr/bin/node; a build against a
// shared libuv or libnode has them in libuv.so.1 or libnode.so instead,
// and node-fs finds them there). Node has no USDT probes since v19, so
// function probes are the way in. The example shows:
//
//   - globbing: Binary.Functions("uv_fs_*") lists the 50-odd exported
//     uv_fs_ functions; the ones whose argument layout node-fs knows (the
//     table fsFunctions, from libuv's public uv.h) are traced, the rest
//     (accessors such as uv_fs_get_result, uv_fs_req_cleanup) are not;
//   - one entry program for all of them: the attach cookie (Options.Cookie)
//     tells it which arguments are paths to copy with
//     bpf_probe_read_user_str and where the callback argument is;
//   - return values through Return, which on a native binary is a kernel
//     uretprobe, paired with the entry by thread id;
//   - uprobe_multi when the kernel has it (Prepare); the
//     68 links (an entry and a return for each of 34 functions) are
//     closed concurrently, since each close waits for the kernel's RCU
//     grace periods.
//
// Every uv_fs_X(loop, req, ...) call is synchronous when its callback
// argument is NULL (Node's fs.*Sync functions, and module loading): the
// function does the work and returns its result, a file descriptor, a
// byte count, 0, or a negative errno (UV_ENOENT is -ENOENT on Linux). With
// a callback (fs.readFile, fs.promises) the function only queues the work
// on libuv's thread pool and returns 0; the result reaches the callback
// later, and node-fs prints "queued" for such calls.
//
// With a command, the command is started stopped right after its execve
// (procmaps.Launch), the probes are attached for its PID only, and then it
// runs: nothing is missed. The tracer exits when the command does; -n
// stops tracing after COUNT lines and lets the command run on. With -p, a
// running process is traced until it exits or Ctrl-C.
//
// Output (node 20, a script that writes, appends and reads a file):
//
//	PID      FUNCTION        ARGUMENTS                                  RESULT        TIME
//	27654    uv_fs_open      "/tmp/notes.txt" O_WRONLY|O_CREAT|O_TRUNC 0666 = 18          128µs
//	27654    uv_fs_write     fd 18, 6 bytes at current                  = 6           24.6µs
//	27654    uv_fs_close     fd 18                                      = 0           4.57µs
//	27654    uv_fs_stat      "/tmp/missing.txt"                         = -2 ENOENT   27µs
//	27654    uv_fs_open      "/tmp/notes.txt" O_RDONLY 0666             queued        361µs
//
// For uv_fs_read and uv_fs_write, the bytes are the size of the buffers
// passed; the result is what was read or written.
//
// The BPF side is nodefs.c (C, built by bpf2go: see gen.go).
package main

import (
	"context"
	"debug/elf"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/probekit/probekit/procmaps"
	"github.com/probekit/probekit/uprobe"
)

// libDirs are where a node built against a shared libnode or libuv finds
// it (Debian's multiarch directories first, as ld.so.conf lists them).
var libDirs = []string{
	"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu",
	"/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
	"/lib64", "/usr/lib64", "/lib", "/usr/lib", "/usr/local/lib",
}

// argKind says how an argument of a uv_fs_* function is read and printed.
type argKind uint8

const (
	argPath   argKind = iota + 1 // const char *, copied by the BPF program
	argFD                        // uv_file (int)
	argOFlags                    // open(2) flags
	argMode                      // permission bits, in octal
	argInt                       // any other int (access mode, scandir or copyfile flags)
	argBufs                      // const uv_buf_t bufs[] with the count next: printed as the bytes they hold
	argOffset                    // int64_t file offset, -1 for the current position
	argSize                      // size_t byte count
)

// fsFunction is the layout of one uv_fs_X(uv_loop_t *loop, uv_fs_t *req,
// ...) function of libuv's uv.h (libuv 1.x, stable since 1.0): the
// arguments after loop and req, and the position of the uv_fs_cb.
// Positions count integer and pointer arguments only: the double
// arguments of uv_fs_utime and friends travel in vector registers (xmm0,
// v0) on x86-64 and arm64 and take no integer register.
type fsFunction struct {
	name string
	args []argKind // arguments 3, 4, ...; argBufs takes two (bufs, nbufs)
	cb   int       // 1-based index of the callback argument
}

// fsFunctions are the functions traced, from libuv's include/uv.h.
var fsFunctions = []fsFunction{
	{"uv_fs_open", []argKind{argPath, argOFlags, argMode}, 6},
	{"uv_fs_close", []argKind{argFD}, 4},
	{"uv_fs_read", []argKind{argFD, argBufs, argOffset}, 7},
	{"uv_fs_write", []argKind{argFD, argBufs, argOffset}, 7},
	{"uv_fs_stat", []argKind{argPath}, 4},
	{"uv_fs_lstat", []argKind{argPath}, 4},
	{"uv_fs_fstat", []argKind{argFD}, 4},
	{"uv_fs_statfs", []argKind{argPath}, 4},
	{"uv_fs_access", []argKind{argPath, argInt}, 5},
	{"uv_fs_unlink", []argKind{argPath}, 4},
	{"uv_fs_mkdir", []argKind{argPath, argMode}, 5},
	{"uv_fs_mkdtemp", []argKind{argPath}, 4},
	{"uv_fs_rmdir", []argKind{argPath}, 4},
	{"uv_fs_opendir", []argKind{argPath}, 4},
	{"uv_fs_scandir", []argKind{argPath, argInt}, 5},
	{"uv_fs_readlink", []argKind{argPath}, 4},
	{"uv_fs_realpath", []argKind{argPath}, 4},
	{"uv_fs_rename", []argKind{argPath, argPath}, 5},
	{"uv_fs_link", []argKind{argPath, argPath}, 5},
	{"uv_fs_symlink", []argKind{argPath, argPath, argInt}, 6},
	{"uv_fs_copyfile", []argKind{argPath, argPath, argInt}, 6},
	{"uv_fs_chmod", []argKind{argPath, argMode}, 5},
	{"uv_fs_fchmod", []argKind{argFD, argMode}, 5},
	{"uv_fs_fsync", []argKind{argFD}, 4},
	{"uv_fs_fdatasync", []argKind{argFD}, 4},
	{"uv_fs_ftruncate", []argKind{argFD, argOffset}, 5},
	{"uv_fs_mkstemp", []argKind{argPath}, 4},
	{"uv_fs_chown", []argKind{argPath, argInt, argInt}, 6},
	{"uv_fs_lchown", []argKind{argPath, argInt, argInt}, 6},
	{"uv_fs_fchown", []argKind{argFD, argInt, argInt}, 6},
	{"uv_fs_utime", []argKind{argPath}, 4},  // then double atime, mtime
	{"uv_fs_lutime", []argKind{argPath}, 4}, // then double atime, mtime
	{"uv_fs_futime", []argKind{argFD}, 4},   // then double atime, mtime
	{"uv_fs_sendfile", []argKind{argFD, argFD, argOffset, argSize}, 7},
}

// Cookie bits, as nodefs.c reads them.
const (
	cookieStr3  = 1 << 8  // argument 3 is a path
	cookieStr4  = 1 << 9  // argument 4 is a path
	cookieBufs4 = 1 << 10 // argument 4 is uv_buf_t[argument 5]
)

// cookieOf encodes what the entry program needs to know about function
// number i of fsFunctions.
func cookieOf(i int) uint64 {
	f := fsFunctions[i]
	c := uint64(i)<<32 | uint64(f.cb)
	pos := 3
	for _, a := range f.args {
		switch {
		case a == argPath && pos == 3:
			c |= cookieStr3
		case a == argPath && pos == 4:
			c |= cookieStr4
		case a == argBufs && pos == 4:
			c |= cookieBufs4
		}
		pos++
		if a == argBufs {
			pos++ // nbufs
		}
	}
	return c
}

func main() {
	log.SetFlags(0)
	log.SetPrefix("node-fs: ")
	pid := flag.Int("p", 0, "trace this running Node.js process")
	count := flag.Int("n", 0, "stop tracing after `COUNT` calls (0: no limit); a command runs on untraced")
	object := flag.String("lib", "", "the `file` that exports libuv's uv_fs_* functions (default: found from the node executable)")
	verbose := flag.Bool("v", false, "list the uv_fs_* functions that are not traced")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: node-fs [-n COUNT] [-lib FILE] [-v] (-p PID | -- CMD ARGS...)\n")
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
	opts := options{PID: *pid, Object: *object}
	if len(args) > 0 {
		opts.Cmd = exec.Command(args[0], args[1:]...)
		opts.Cmd.Stdin, opts.Cmd.Stdout, opts.Cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		// A launched command gets Ctrl-C from the terminal and the tracer
		// ends with it: catch SIGINT and do nothing with it (caught, not
		// ignored, or the command would inherit the ignore).
		signal.Notify(make(chan os.Signal, 1), os.Interrupt)
	}
	if *verbose {
		opts.Skipped = func(names []string) {
			log.Printf("not traced (argument layout not in fsFunctions): %s", strings.Join(names, " "))
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	fmt.Printf("%-8s %-15s %-42s %-13s %s\n", "PID", "FUNCTION", "ARGUMENTS", "RESULT", "TIME")
	n := 0
	err := trace(ctx, opts, func(c Call) bool {
		fmt.Println(format(c))
		n++
		return *count == 0 || n < *count
	})
	if err != nil {
		log.Fatal(err)
	}
}

// options says whom to trace: a running process (PID) or a command to
// launch (Cmd).
type options struct {
	PID int
	Cmd *exec.Cmd
	// Object is the file exporting uv_fs_*; "" finds it (see findLibuv).
	// With PID, a path as the process sees it.
	Object string
	// Skipped, if set, gets the names matching uv_fs_* that are not
	// traced.
	Skipped func(names []string)
	// Attached, if set, is called once the probes are in place (before a
	// launched command runs).
	Attached func(pid int)
}

// Call is one uv_fs_* call that returned.
type Call struct {
	PID, TID uint32
	Function string
	// Args are the arguments after loop and req, formatted.
	Args string
	// Path and Path2 are the path arguments ("" if none).
	Path, Path2 string
	// FD is the file descriptor argument, -1 if none.
	FD int
	// Flags are uv_fs_open's flags (0 for the other functions).
	Flags int
	// Bytes is the size of the buffers of uv_fs_read and uv_fs_write.
	Bytes uint64
	// Async is set when a callback was passed: Result is then 0 when the
	// request was queued, negative when it was refused.
	Async bool
	// Result is the int the function returned.
	Result  int
	Latency time.Duration
}

// trace loads the BPF programs, attaches them to the uv_fs_* functions
// for one process, and passes each call to handle until handle returns
// false, the process exits, or ctx is done. A launched command is sent
// SIGTERM when ctx is done, and waited for in every case; its exit error
// is returned.
func trace(ctx context.Context, opts options, handle func(Call) bool) (err error) {
	spec, err := loadNodefs()
	if err != nil {
		return err
	}
	if err := uprobe.Prepare(spec); err != nil {
		return err
	}
	var objs nodefsObjects
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		return fmt.Errorf("load BPF objects: %w", err)
	}
	defer objs.Close()

	// Whom to trace. A launched command waits, stopped after its execve,
	// until Finish(nil): any error return before that kills it.
	var (
		bin      *uprobe.Binary
		launched *procmaps.Launched
		pid      = opts.PID
	)
	if opts.Cmd != nil {
		exe, err := exec.LookPath(opts.Cmd.Path)
		if err != nil {
			return err
		}
		path := opts.Object
		if path == "" {
			if path, err = findLibuv(exe); err != nil {
				return err
			}
		}
		if bin, err = uprobe.Open(path); err != nil {
			return err
		}
		defer bin.Close()
		if launched, err = procmaps.Launch(opts.Cmd); err != nil {
			return err
		}
		defer func() { err = launched.Finish(err) }()
		pid = launched.Cmd.Process.Pid
	} else if bin, err = openInProcess(pid, opts.Object); err != nil {
		return err
	} else {
		defer bin.Close()
	}

	links, err := attach(bin, pid, &objs, opts.Skipped)
	if err != nil {
		return err
	}
	detach := sync.OnceFunc(func() { closeLinks(links) })
	defer detach()
	if opts.Attached != nil {
		opts.Attached(pid)
	}

	rd, err := ringbuf.NewReader(objs.Events)
	if err != nil {
		return err
	}
	defer rd.Close()

	exited := make(chan struct{})
	var waitErr error
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
		proc, err := procmaps.Open(pid)
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			watchExit(helpers, proc, exited)
		}()
	}
	// When the process is gone or ctx is done, Flush hands out what is
	// left in the ring buffer, then ErrFlushed: every call of an exited
	// process is in it, written by its threads before they exited.
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
		log.Printf("%d calls not shown: the ring buffer was full", n)
	}
	if opts.Cmd == nil {
		return err
	}
	if err != nil {
		opts.Cmd.Process.Kill()
		<-exited
		return err
	}
	detach() // a command stopped by handle (-n) runs on untraced
	<-exited
	if waitErr != nil {
		return fmt.Errorf("%s: %w", opts.Cmd.Path, waitErr)
	}
	return nil
}

// attach puts the entry and return programs on every uv_fs_* function of
// bin that fsFunctions describes, for process pid. Returns are attached
// first: in a running process (-p), an entry whose return is not yet
// probed would leave a stale slot for its thread.
func attach(bin *uprobe.Binary, pid int, objs *nodefsObjects, skipped func([]string)) (links []link.Link, err error) {
	defer func() {
		if err != nil {
			closeLinks(links)
		}
	}()
	found := bin.Functions("uv_fs_*")
	if len(found) == 0 {
		return nil, fmt.Errorf("%s exports no uv_fs_* function: pass the file that does (libuv.so.1, libnode.so) with -lib", bin.Path())
	}
	var notTraced []string
	traced := 0
	for _, fn := range found {
		i := slices.IndexFunc(fsFunctions, func(f fsFunction) bool { return f.name == fn.Name })
		if i < 0 {
			notTraced = append(notTraced, fn.Name)
			continue
		}
		r, err := bin.Return(fn.Name, objs.OnReturn, &uprobe.Options{PID: pid})
		if err != nil {
			return links, err
		}
		links = append(links, r)
		e, err := bin.Entry(fn.Name, objs.OnEntry, &uprobe.Options{PID: pid, Cookie: cookieOf(i)})
		if err != nil {
			return links, err
		}
		links = append(links, e)
		traced++
	}
	if traced == 0 {
		return links, fmt.Errorf("%s: none of its uv_fs_* functions is one node-fs knows", bin.Path())
	}
	if skipped != nil && len(notTraced) > 0 {
		skipped(notTraced)
	}
	return links, nil
}

// findLibuv returns the file that holds the uv_fs_* functions node exe
// runs: exe itself (the official builds and Debian's nodejs 20 link libuv
// in), else the libnode or libuv it needs (Debian's nodejs 18 has
// libnode.so.108 and the shared libuv.so.1), looked up in libDirs.
func findLibuv(exe string) (string, error) {
	ef, err := elf.Open(exe)
	if err != nil {
		return "", err
	}
	defer ef.Close()
	syms, _ := ef.DynamicSymbols()
	for _, s := range syms {
		if s.Name == "uv_fs_open" && s.Section != elf.SHN_UNDEF {
			return exe, nil
		}
	}
	needed, _ := ef.ImportedLibraries()
	for _, lib := range needed {
		if !strings.HasPrefix(lib, "libnode.so") && !strings.HasPrefix(lib, "libuv.so") {
			continue
		}
		for _, dir := range libDirs {
			if p := filepath.Join(dir, lib); fileExists(p) {
				return p, nil
			}
		}
	}
	return "", fmt.Errorf("%s does not define uv_fs_open and needs no libnode or libuv found in %s: pass the file with -lib", exe, strings.Join(libDirs, ", "))
}

// openInProcess opens the object of process pid that defines the uv_fs_*
// functions: path if given (as the process sees it), else the mapped
// node, libnode or libuv that exports uv_fs_open.
func openInProcess(pid int, path string) (*uprobe.Binary, error) {
	if path != "" {
		return uprobe.OpenProcess(pid, path)
	}
	proc, err := procmaps.Open(pid)
	if err != nil {
		return nil, err
	}
	objs, err := proc.Objects()
	if err != nil {
		return nil, err
	}
	var tried []string
	for _, o := range objs {
		base := filepath.Base(o.Path)
		if !strings.Contains(base, "node") && !strings.HasPrefix(base, "libuv") {
			continue
		}
		tried = append(tried, o.Path)
		bin, err := uprobe.OpenProcess(pid, o.Path)
		if err != nil {
			continue
		}
		if _, err := bin.Function("uv_fs_open"); err == nil {
			return bin, nil
		}
		bin.Close()
	}
	if len(tried) == 0 {
		return nil, fmt.Errorf("pid %d maps no node, libnode or libuv: is it Node.js? (-lib names the file)", pid)
	}
	return nil, fmt.Errorf("pid %d: none of %s defines uv_fs_open: pass the file with -lib", pid, strings.Join(tried, ", "))
}

// readCalls decodes events until handle returns false or the reader is
// flushed.
func readCalls(rd *ringbuf.Reader, handle func(Call) bool) error {
	var rec ringbuf.Record
	for {
		err := rd.ReadInto(&rec)
		if errors.Is(err, ringbuf.ErrFlushed) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read ring buffer: %w", err)
		}
		if len(rec.RawSample) < int(unsafe.Sizeof(nodefsEvent{})) {
			return fmt.Errorf("event of %d bytes, want %d: rebuild nodefs.c (go generate)", len(rec.RawSample), unsafe.Sizeof(nodefsEvent{}))
		}
		// In place: bpf2go's nodefsEvent has the C layout, and the
		// record's buffer is 8-byte aligned.
		ev := (*nodefsEvent)(unsafe.Pointer(&rec.RawSample[0]))
		if int(ev.Func) >= len(fsFunctions) {
			return fmt.Errorf("event for function %d of %d: BPF program and Go table disagree", ev.Func, len(fsFunctions))
		}
		if !handle(callOf(ev)) {
			return nil
		}
	}
}

// callOf decodes an event with its function's layout.
func callOf(ev *nodefsEvent) Call {
	f := fsFunctions[ev.Func]
	c := Call{
		PID: ev.Pid, TID: ev.Tid, Function: f.name, FD: -1,
		Bytes: ev.Bytes, Async: ev.Async != 0,
		Result: int(ev.Ret), Latency: time.Duration(ev.LatencyNs),
	}
	var parts []string
	arg := 0 // index into ev.Args: argument 3 + arg
	for _, k := range f.args {
		v := uint64(0)
		if arg < len(ev.Args) {
			v = ev.Args[arg]
		}
		switch k {
		case argPath:
			// nodefs.c copies argument 3 into path, argument 4 into path2.
			if arg == 0 {
				c.Path = cString(ev.Path[:])
				parts = append(parts, strconv.Quote(c.Path))
			} else {
				c.Path2 = cString(ev.Path2[:])
				parts = append(parts, strconv.Quote(c.Path2))
			}
		case argFD:
			c.FD = int(int32(v))
			parts = append(parts, "fd "+strconv.Itoa(c.FD))
		case argOFlags:
			c.Flags = int(int32(v))
			parts = append(parts, openFlags(c.Flags))
		case argMode:
			parts = append(parts, fmt.Sprintf("%#o", uint32(v)))
		case argInt:
			parts = append(parts, strconv.Itoa(int(int32(v))))
		case argSize:
			parts = append(parts, strconv.FormatUint(v, 10)+" bytes")
		case argBufs:
			parts = append(parts, fmt.Sprintf("%d bytes", ev.Bytes))
			arg++ // nbufs
		case argOffset:
			if off := int64(v); off < 0 {
				parts = append(parts, "at current")
			} else {
				parts = append(parts, "at "+strconv.FormatInt(off, 10))
			}
		}
		arg++
	}
	c.Args = strings.Join(parts, " ")
	if len(parts) > 1 && f.args[0] == argFD {
		c.Args = parts[0] + ", " + strings.Join(parts[1:], " ")
	}
	return c
}

// format is one output line.
func format(c Call) string {
	res := "= " + strconv.Itoa(c.Result)
	switch {
	case c.Result < 0:
		res += " " + unix.ErrnoName(syscall.Errno(-c.Result))
	case c.Async:
		res = "queued"
	}
	return fmt.Sprintf("%-8d %-15s %-42s %-13s %s", c.PID, c.Function, c.Args, res, formatLatency(c.Latency))
}

// openFlagNames are the open(2) flags printed by name, in order; the
// access mode comes first and is not a bit.
var openFlagNames = []struct {
	bit  int
	name string
}{
	{unix.O_CREAT, "O_CREAT"}, {unix.O_EXCL, "O_EXCL"}, {unix.O_NOCTTY, "O_NOCTTY"},
	{unix.O_TRUNC, "O_TRUNC"}, {unix.O_APPEND, "O_APPEND"}, {unix.O_NONBLOCK, "O_NONBLOCK"},
	{unix.O_DSYNC, "O_DSYNC"}, {unix.O_DIRECT, "O_DIRECT"}, {unix.O_DIRECTORY, "O_DIRECTORY"},
	{unix.O_NOFOLLOW, "O_NOFOLLOW"}, {unix.O_NOATIME, "O_NOATIME"}, {unix.O_CLOEXEC, "O_CLOEXEC"},
	{unix.O_SYNC &^ unix.O_DSYNC, "O_SYNC"}, {unix.O_PATH, "O_PATH"},
}

// openFlags names the bits of an open(2) flags word: Node passes the
// host's O_* values to uv_fs_open unchanged.
func openFlags(flags int) string {
	var names []string
	switch flags & unix.O_ACCMODE {
	case unix.O_RDONLY:
		names = append(names, "O_RDONLY")
	case unix.O_WRONLY:
		names = append(names, "O_WRONLY")
	case unix.O_RDWR:
		names = append(names, "O_RDWR")
	default:
		names = append(names, "O_ACCMODE")
	}
	rest := flags &^ unix.O_ACCMODE
	for _, f := range openFlagNames {
		if rest&f.bit == f.bit && f.bit != 0 {
			names = append(names, f.name)
			rest &^= f.bit
		}
	}
	if rest != 0 {
		names = append(names, fmt.Sprintf("%#x", rest))
	}
	return strings.Join(names, "|")
}

// formatLatency rounds d to three significant digits: 1.23µs, 45.6ms.
func formatLatency(d time.Duration) string {
	unit := time.Nanosecond
	for limit := time.Microsecond; d >= limit; limit *= 10 {
		unit *= 10
	}
	return d.Round(unit).String()
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
func lostCount(objs *nodefsObjects) uint64 {
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

// closeLinks closes links concurrently: each close of a uprobe link waits
// for RCU grace periods in the kernel (50-77 ms, see measured.md), and the
// waits overlap: the 68 links of a trace close in about 0.1 s instead of
// 3.5 s.
func closeLinks(links []link.Link) {
	var wg sync.WaitGroup
	for _, l := range links {
		wg.Go(func() { l.Close() })
	}
	wg.Wait()
}

func fileExists(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular()
}
