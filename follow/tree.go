package follow

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/probekit/probekit/attach"
	"github.com/probekit/probekit/internal/features"
	"github.com/probekit/probekit/procmaps"
	"github.com/probekit/probekit/usdt"
)

// Options tune a Tree. The zero value (or nil) is valid for function
// probes only.
type Options struct {
	// Attacher attaches the USDT probes (the one bound to the programs'
	// collection).
	Attacher *usdt.Attacher
	// Notify, when set, is called for each Event, on the tracer's
	// goroutine: the process concerned waits until it returns, so it
	// must be quick.
	Notify func(Event)
	// Cgroup, for WatchHost, keeps the processes whose cgroup path (as
	// /proc/PID/cgroup gives it, in any hierarchy: "/system.slice/x",
	// "/docker/ID") matches this glob: a container. Files are then
	// attached per process, since a path-wide probe would fire in the
	// processes outside it that map the same file.
	Cgroup string
	// Hold, when set, is called for a Tree's process on the tracer's
	// goroutine while the process is stopped with its maps whole: after
	// its probes are attached at its start and at each exec, at its
	// program's entry point after each exec (x86-64: its shared
	// libraries mapped, procmaps.EntryStop), and at its exit, before the
	// kernel releases its memory (PTRACE_O_TRACEEXIT,
	// which stops each thread of the tree at its exit). A symbolizer
	// reads the process there (symbolize.Stacks.Watch), so that stacks
	// read after it exited are named. It must be quick. WatchProcess
	// calls it for its process, without stopping it, when it reads its
	// maps (at its execs and link-map changes); WatchHost never.
	Hold func(*procmaps.Process)
	// ProcessOnly, for Attach, follows the process alone (its threads and
	// execs), not its descendants: its children are not traced. It is
	// what a tracer of one process uses to attach a library it dlopens
	// before the library's first hit, as a Tree does (WatchProcess
	// attaches it only when its event reaches the watcher, missing the
	// hits of the first milliseconds).
	ProcessOnly bool
}

// heldHook is copied into each new Tree's held (benchmarks).
var heldHook func(time.Duration)

// traceOptions are the ptrace options of every process of a tree: report
// each new child or thread (which starts stopped) and each execve.
const traceOptions = unix.PTRACE_O_TRACEFORK | unix.PTRACE_O_TRACEVFORK |
	unix.PTRACE_O_TRACECLONE | unix.PTRACE_O_TRACEEXEC

// pollEvery bounds how long the tracer sleeps between two looks for
// stopped processes when no SIGCHLD wakes it (signals coalesce).
const pollEvery = 50 * time.Millisecond

// maxClosing bounds the links closed at once (each close blocks a thread
// for the kernel's RCU grace periods).
const maxClosing = 64

// Tree follows a process tree. See the package documentation.
type Tree struct {
	probes []Probe
	opts   Options
	root   int
	// cmd is the launched command; nil for Attach.
	cmd *exec.Cmd

	stop     chan struct{}
	stopOnce sync.Once
	closed   atomic.Bool   // Close has begun
	done     chan struct{} // closed when the tracer has ended
	exited   chan struct{} // closed when the root process has exited
	exitErr  error         // the root's exit, set before exited is closed
	// rootReaped: the tracer has reaped the launched command.
	rootReaped bool
	loopErr    error // why the tracer ended early, set before done

	closer *closer
	// objs and watch serve the selector probes (Target "*" or a glob):
	// the objects of each process, attached in it alone, rescanned when
	// its dynamic linker loads more. nil without selector probes.
	objs  *objects
	watch *watcher
	wdone chan struct{}

	// Owned by the tracer goroutine:
	members map[int]*member // by PID (TGID) of a followed process
	tasks   map[int]bool    // every thread known, true until its first stop
	pending map[int]bool    // new tasks whose first stop is still to come

	// held, when set (benchmarks), gets how long each stop at a fork or
	// an exec lasted.
	held func(time.Duration)

	mu       sync.Mutex
	sitesNow int // locations attached now, over every process
}

// member is a followed process: its links for its current image.
type member struct {
	proc  *procmaps.Process
	links []*attach.Link
	which []*Probe
	// entry stops the process at its program's entry point for Hold.
	entry procmaps.EntryStop
}

func newTree(probes []Probe, opts *Options) (*Tree, error) {
	t := &Tree{
		stop: make(chan struct{}), done: make(chan struct{}), exited: make(chan struct{}),
		closer:  newCloser(),
		members: map[int]*member{}, tasks: map[int]bool{}, pending: map[int]bool{},
	}
	if opts != nil {
		t.opts = *opts
	}
	t.held = heldHook
	cookie, err := features.Have(features.Cookie)
	if err != nil {
		return nil, fmt.Errorf("follow: probe BPF cookie support: %w", err)
	}
	var selectors []*Probe
	for _, p := range probes {
		if err := p.check(t.opts.Attacher != nil); err != nil {
			return nil, err
		}
		if Selector(p.Target) {
			selectors = append(selectors, &p)
			continue
		}
		p, err := p.resolve()
		if err != nil {
			return nil, err
		}
		if !cookie {
			// Without BPF cookies a site in a position-independent
			// file is found by its runtime address in each process,
			// known once the process maps the file: the probe is
			// attached as each process maps it (its dynamic linker
			// reports each change), like a selector's.
			if p.file, err = procmaps.IDOf(p.Target); err != nil {
				return nil, fmt.Errorf("probe %s: %w", &p, err)
			}
			selectors = append(selectors, &p)
			continue
		}
		t.probes = append(t.probes, p)
	}
	if len(t.probes) == 0 && len(selectors) == 0 {
		return nil, errors.New("follow: no probe")
	}
	if len(selectors) > 0 {
		w, err := newWatcher(false, true)
		if err != nil {
			return nil, err
		}
		t.watch, t.wdone = w, make(chan struct{})
		t.objs = newObjects(selectors, t.opts.Attacher, false, t.notify, t.closer)
		t.objs.loader = w.loader
		go t.watchLoop()
	}
	return t, nil
}

// Launch starts cmd stopped right after its execve, attaches the probes to
// it, and lets it run; its descendants are followed. The Tree reaps the
// command: wait with Exited and ExitErr, not cmd.Wait.
func Launch(cmd *exec.Cmd, probes []Probe, opts *Options) (*Tree, error) {
	t, err := newTree(probes, opts)
	if err != nil {
		return nil, err
	}
	t.cmd = cmd
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	// PTRACE_TRACEME in the child: it stops with SIGTRAP at its execve.
	cmd.SysProcAttr.Ptrace = true
	started := make(chan error, 1)
	go t.run(func() error {
		if err := cmd.Start(); err != nil {
			return err
		}
		pid := cmd.Process.Pid
		t.root = pid
		if err := procmaps.WaitExecStop(pid); err != nil {
			syscall.Kill(pid, syscall.SIGKILL)
			return err
		}
		if err := unix.PtraceSetOptions(pid, int(t.ptraceOptions())); err != nil {
			syscall.Kill(pid, syscall.SIGKILL)
			return fmt.Errorf("PTRACE_SETOPTIONS: %w", err)
		}
		t.tasks[pid] = false
		t.adopt(pid)
		t.armEntry(pid)
		return unix.PtraceCont(pid, 0)
	}, started)
	if err := <-started; err != nil {
		if cmd.Process != nil {
			cmd.Wait()
		}
		t.closeWatch()
		t.closer.wait()
		return nil, fmt.Errorf("launch %s: %w", cmd.Path, err)
	}
	return t, nil
}

// Attach follows the running process proc and its descendants from now
// on (PTRACE_SEIZE; they are not stopped). Exited says when proc exits.
// A proc whose PID another process has now is refused
// (procmaps.ErrProcessChanged), once seized: the seized PID cannot be
// reused while it is.
func Attach(proc *procmaps.Process, probes []Probe, opts *Options) (*Tree, error) {
	t, err := newTree(probes, opts)
	if err != nil {
		return nil, err
	}
	pid := proc.PID
	t.root = pid
	started := make(chan error, 1)
	go t.run(func() error {
		if err := proc.Check(); err != nil {
			return err
		}
		if err := t.seizeTree(pid); err != nil {
			return err
		}
		// Seized, the PID cannot change hands: this check holds.
		if err := proc.Check(); err != nil {
			return err
		}
		if t.objs != nil && t.opts.ProcessOnly {
			// As WatchProcess: the probes none of its objects has
			// now (and the trace's sign that it is in place).
			t.objs.reportMissing()
		}
		return nil
	}, started)
	if err := <-started; err != nil {
		t.closeWatch()
		t.closer.wait()
		return nil, fmt.Errorf("follow pid %d: %w", pid, err)
	}
	return t, nil
}

// seizeTree seizes every thread of pid and of its descendants alive now,
// and attaches the probes to each process.
func (t *Tree) seizeTree(pid int) error {
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if err := t.seizeProcess(p); err != nil {
			if p == pid {
				return err
			}
			continue // exited meanwhile
		}
		t.adopt(p)
		if !t.opts.ProcessOnly {
			queue = append(queue, children(p)...)
		}
	}
	return nil
}

// seizeProcess seizes the threads of pid until no new one appears.
func (t *Tree) seizeProcess(pid int) error {
	for {
		ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
		if err != nil {
			return err
		}
		added := 0
		for _, e := range ents {
			tid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if _, ok := t.tasks[tid]; ok {
				continue
			}
			if err := seize(tid, t.ptraceOptions()); err != nil {
				if tid == pid {
					// EPERM: traced already (a debugger, strace: a
					// process has one tracer), or ptrace forbidden
					// (Yama ptrace_scope 3, a seccomp filter).
					return fmt.Errorf("PTRACE_SEIZE: %w (is it traced already? a process has one tracer)", err)
				}
				continue
			}
			t.tasks[tid] = false
			added++
		}
		if added == 0 {
			return nil
		}
	}
}

// ptraceOptions are traceOptions, with the exit stop for Options.Hold.
func (t *Tree) ptraceOptions() uintptr {
	opts := uintptr(traceOptions)
	if t.opts.ProcessOnly {
		// Threads are still reported (a clone whose exit signal is not
		// SIGCHLD); fork, vfork and posix_spawn children are not
		// (kernel_clone, kernel/fork.c).
		opts &^= unix.PTRACE_O_TRACEFORK | unix.PTRACE_O_TRACEVFORK
	}
	if t.opts.Hold != nil {
		opts |= unix.PTRACE_O_TRACEEXIT
	}
	return opts
}

func seize(tid int, opts uintptr) error {
	_, _, e := syscall.Syscall6(syscall.SYS_PTRACE, unix.PTRACE_SEIZE, uintptr(tid), 0, opts, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// children lists the child processes of pid's threads
// (/proc/PID/task/TID/children, CONFIG_PROC_CHILDREN).
func children(pid int) []int {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	ents, _ := os.ReadDir(dir)
	var out []int
	for _, e := range ents {
		b, err := os.ReadFile(dir + "/" + e.Name() + "/children")
		if err != nil {
			continue
		}
		for _, f := range bytes.Fields(b) {
			if c, err := strconv.Atoi(string(f)); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}

// run is the tracer: one goroutine locked to its thread, since ptrace
// requests come from the tracing thread. The thread is never unlocked: it
// exits with the goroutine, and the kernel detaches what it still traces.
func (t *Tree) run(start func() error, started chan<- error) {
	runtime.LockOSThread()
	defer close(t.done)
	sigchld := make(chan os.Signal, 1)
	signal.Notify(sigchld, syscall.SIGCHLD)
	defer signal.Stop(sigchld)
	if err := start(); err != nil {
		t.releaseAll()
		started <- err
		return
	}
	started <- nil
	defer t.releaseAll()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		var ws unix.WaitStatus
		// __WNOTHREAD: only this thread's children and tracees, never a
		// child another goroutine started and waits for.
		pid, err := unix.Wait4(-1, &ws, unix.WALL|unix.WNOHANG|unix.WNOTHREAD, nil)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.ECHILD):
			// Nothing left to trace.
			t.rootExited(nil)
			return
		case err != nil:
			t.loopErr = err
			t.rootExited(nil)
			return
		case pid == 0:
			select {
			case <-t.stop:
				t.rootExited(nil)
				return
			case <-sigchld:
			case <-tick.C:
			}
			continue
		}
		t.handle(pid, ws)
	}
}

// rootExited records the root's end once.
func (t *Tree) rootExited(err error) {
	select {
	case <-t.exited:
	default:
		t.exitErr = err
		close(t.exited)
	}
}

// handle acts on one wait status of a traced task and resumes it.
func (t *Tree) handle(pid int, ws unix.WaitStatus) {
	if ws.Exited() || ws.Signaled() {
		delete(t.tasks, pid)
		delete(t.pending, pid)
		t.release(pid)
		if pid == t.root {
			var err error
			if ws.Signaled() {
				err = fmt.Errorf("signal: %v", ws.Signal())
			} else if ws.ExitStatus() != 0 {
				err = fmt.Errorf("exit status %d", ws.ExitStatus())
			}
			if t.cmd != nil {
				// Reaped here: Wait only releases the command's pipes.
				t.rootReaped = true
				t.cmd.Wait()
			}
			t.rootExited(err)
		}
		return
	}
	if !ws.Stopped() {
		return
	}
	sig := ws.StopSignal()
	cause := int(uint32(ws) >> 16)
	// A new task starts with a stop: SIGSTOP, or PTRACE_EVENT_STOP for
	// the children of a seized task.
	if sig == unix.SIGSTOP || cause == unix.PTRACE_EVENT_STOP {
		if t.pending[pid] {
			// Attached at its parent's event already.
			delete(t.pending, pid)
			unix.PtraceCont(pid, 0)
			return
		}
		if _, known := t.tasks[pid]; !known {
			// Before its parent's event: attach now, resume when the
			// event comes.
			t.tasks[pid] = true
			t.adopt(pid)
			return
		}
	}
	switch {
	case sig == unix.SIGTRAP && (cause == unix.PTRACE_EVENT_FORK || cause == unix.PTRACE_EVENT_VFORK || cause == unix.PTRACE_EVENT_CLONE):
		if msg, err := unix.PtraceGetEventMsg(pid); err == nil {
			child := int(msg)
			if _, known := t.tasks[child]; !known {
				// Stopped until its first stop is resumed below.
				t.tasks[child] = false
				t.pending[child] = true
				start := time.Now()
				t.adopt(child)
				if t.held != nil {
					t.held(time.Since(start))
				}
			} else if t.tasks[child] {
				// Its first stop came first: it waits for this.
				t.tasks[child] = false
				unix.PtraceCont(child, 0)
			}
		}
		unix.PtraceCont(pid, 0)
	case sig == unix.SIGTRAP && cause == unix.PTRACE_EVENT_EXEC:
		// A new image. The links of named files stay: each is the
		// file's uprobe filtered to this PID, planted in whatever maps
		// the file, before or after an exec (closing and attaching
		// again would fire twice while the old link closes). The
		// objects of selector probes are read again. Without BPF
		// cookies a site is found by its runtime address in this
		// process, which the new image changed (or gave at last, for a
		// file the old image did not map): the links are made again.
		start := time.Now()
		t.mu.Lock()
		m := t.members[pid]
		t.mu.Unlock()
		cookie, err := features.Have(features.Cookie)
		switch {
		case m == nil:
			t.adopt(pid)
		case err == nil && !cookie:
			t.readopt(pid)
		case t.objs != nil:
			t.objs.scan(m.proc)
		}
		if m != nil && t.opts.Hold != nil {
			t.opts.Hold(m.proc)
		}
		t.armEntry(pid)
		unix.PtraceCont(pid, 0)
		if t.held != nil {
			t.held(time.Since(start))
		}
	case sig == unix.SIGTRAP && cause == unix.PTRACE_EVENT_EXIT:
		// Only with Options.Hold: a process's main thread about to
		// exit, its memory still there.
		t.mu.Lock()
		m := t.members[pid]
		t.mu.Unlock()
		if m != nil && t.opts.Hold != nil {
			t.opts.Hold(m.proc)
		}
		unix.PtraceCont(pid, 0)
	case cause == unix.PTRACE_EVENT_STOP:
		// A seized task's group-stop or interrupt: keep it running.
		unix.PtraceCont(pid, 0)
	default:
		if sig == unix.SIGTRAP && t.entryHit(pid) {
			unix.PtraceCont(pid, 0)
			return
		}
		code, ok := siginfoCode(pid)
		if ok && sig == unix.SIGSTOP && code == siKernel && t.objs != nil {
			// watch_map stopped the thread at its dynamic linker's
			// _dl_debug_state: attach what it mapped, then let it run
			// (the SIGSTOP is not delivered).
			t.mu.Lock()
			m := t.members[tgid(pid)]
			t.mu.Unlock()
			if m != nil {
				t.objs.scan(m.proc)
			}
			unix.PtraceCont(pid, 0)
			return
		}
		// A signal for the task: deliver it, unless it is a group-stop
		// (no siginfo), which would keep the task stopped for good.
		if !ok {
			sig = 0
		}
		unix.PtraceCont(pid, int(sig))
	}
}

// armEntry plants the entry-point breakpoint of process pid, stopped
// right after an exec, when Hold wants the process there: its shared
// libraries are mapped by then.
func (t *Tree) armEntry(pid int) {
	if t.opts.Hold == nil {
		return
	}
	t.mu.Lock()
	m := t.members[pid]
	t.mu.Unlock()
	if m != nil {
		m.entry.Arm(pid)
	}
}

// entryHit reports whether pid's SIGTRAP stop is its entry-point
// breakpoint's, and then calls Hold.
func (t *Tree) entryHit(pid int) bool {
	t.mu.Lock()
	m := t.members[pid]
	t.mu.Unlock()
	if m == nil || !m.entry.Hit(pid) {
		return false
	}
	t.opts.Hold(m.proc)
	return true
}

// siginfoCode returns the si_code of the signal pid's stop delivers; ok is
// false for a group-stop, which has no siginfo (PTRACE_GETSIGINFO fails
// with EINVAL, ptrace(2)).
func siginfoCode(pid int) (code int32, ok bool) {
	var info [128]byte // siginfo_t: si_signo, si_errno, si_code, ...
	_, _, e := syscall.Syscall6(syscall.SYS_PTRACE, unix.PTRACE_GETSIGINFO, uintptr(pid), 0, uintptr(unsafe.Pointer(&info[0])), 0, 0)
	if e != 0 {
		return 0, false
	}
	return *(*int32)(unsafe.Pointer(&info[8])), true
}

// siKernel is SI_KERNEL, the si_code of a signal the kernel sent:
// bpf_send_signal_thread's (include/uapi/asm-generic/siginfo.h).
const siKernel = 0x80

// tgid returns the thread group of task tid (/proc/TID/status), 0 when it
// is gone.
func tgid(tid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(tid) + "/status")
	if err != nil {
		return 0
	}
	_, rest, ok := bytes.Cut(b, []byte("\nTgid:"))
	if !ok {
		return 0
	}
	line, _, _ := bytes.Cut(rest, []byte("\n"))
	n, _ := strconv.Atoi(string(bytes.TrimSpace(line)))
	return n
}

// adopt attaches every probe to process pid (a thread: nothing to do).
// Failures are notified; they never stop the others.
func (t *Tree) adopt(pid int) {
	if tgid(pid) != pid {
		return
	}
	proc, err := procmaps.Open(pid)
	if err != nil {
		for i := range t.probes {
			t.notify(Event{Kind: Failed, PID: pid, Probe: &t.probes[i], File: t.probes[i].Target, Err: err})
		}
		return
	}
	m := &member{proc: proc}
	for i := range t.probes {
		p := &t.probes[i]
		l, err := p.attachTo(t.opts.Attacher, proc)
		if err != nil {
			t.notify(Event{Kind: Failed, PID: pid, Probe: p, File: p.Target, Err: err})
			continue
		}
		m.links = append(m.links, l)
		m.which = append(m.which, p)
		n := len(l.Sites())
		t.mu.Lock()
		t.sitesNow += n
		t.mu.Unlock()
		t.notify(Event{Kind: Attached, PID: pid, Probe: p, File: p.Target, Sites: n})
	}
	t.mu.Lock()
	t.members[pid] = m
	t.mu.Unlock()
	if t.opts.Hold != nil {
		t.opts.Hold(proc)
	}
	if t.objs != nil && !t.closed.Load() {
		if err := t.watch.follow(pid); err != nil {
			t.notify(Event{Kind: Failed, PID: pid, Probe: &loaderProbe, Err: err})
		}
		t.objs.scan(proc)
	}
}

// readopt attaches every probe to pid again after its execve: its old
// links are closed first, while it is stopped at the exec, so that no
// hit of the new image is lost or seen twice.
func (t *Tree) readopt(pid int) {
	closeNow := func(l *attach.Link) { l.Close() }
	t.mu.Lock()
	m := t.members[pid]
	delete(t.members, pid)
	t.mu.Unlock()
	if t.objs != nil {
		t.watch.unfollow(pid)
		t.objs.dropWith(pid, closeNow)
	}
	t.releaseMember(pid, m, closeNow)
	t.adopt(pid)
}

// release closes pid's links, in the background.
func (t *Tree) release(pid int) {
	t.releaseWith(pid, t.closer.close)
}

// releaseWith releases pid's links, closing each with closeLink.
func (t *Tree) releaseWith(pid int, closeLink func(*attach.Link)) {
	t.mu.Lock()
	m := t.members[pid]
	delete(t.members, pid)
	t.mu.Unlock()
	if m == nil {
		return
	}
	if t.objs != nil {
		t.watch.unfollow(pid)
		t.objs.drop(pid)
	}
	t.releaseMember(pid, m, closeLink)
}

// releaseMember releases the links of member m (process pid), closing
// each with closeLink.
func (t *Tree) releaseMember(pid int, m *member, closeLink func(*attach.Link)) {
	if m == nil {
		return
	}
	for i, l := range m.links {
		n := len(l.Sites())
		t.notify(Event{Kind: Detached, PID: pid, Probe: m.which[i], File: m.which[i].Target, Sites: n})
		t.mu.Lock()
		t.sitesNow -= n
		t.mu.Unlock()
		closeLink(l)
	}
}

// releaseAll releases every process's links.
func (t *Tree) releaseAll() {
	t.mu.Lock()
	pids := make([]int, 0, len(t.members))
	for pid := range t.members {
		pids = append(pids, pid)
	}
	t.mu.Unlock()
	for _, pid := range pids {
		t.release(pid)
	}
}

func (t *Tree) notify(e Event) {
	if t.opts.Notify != nil {
		t.opts.Notify(e)
	}
}

// PID is the root process: the launched command or the PID given to
// Attach.
func (t *Tree) PID() int { return t.root }

// Exited is closed when the root process has exited (or the Tree is
// closed). Its descendants may live on, followed until Close.
func (t *Tree) Exited() <-chan struct{} { return t.exited }

// ExitErr is the launched command's failure (nil for success, or for
// Attach), once Exited is closed.
func (t *Tree) ExitErr() error {
	<-t.exited
	return t.exitErr
}

// Processes is the number of processes followed now.
func (t *Tree) Processes() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.members)
}

// Sites is the number of probe locations attached now, over every
// process.
func (t *Tree) Sites() int {
	n := 0
	if t.objs != nil {
		n = t.objs.sites()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return n + t.sitesNow
}

// watchLoop rescans a followed process when its dynamic linker reports
// new objects (exec and exit come through ptrace).
func (t *Tree) watchLoop() {
	defer close(t.wdone)
	var rec ringbuf.Record
	for {
		pid, kind, err := t.watch.next(&rec)
		if err != nil {
			return
		}
		if kind != watchMap {
			continue
		}
		t.mu.Lock()
		m := t.members[pid]
		t.mu.Unlock()
		if m != nil {
			t.objs.scan(m.proc)
		}
	}
}

// closeWatch ends the selector probes' watcher and releases their links.
func (t *Tree) closeWatch() {
	if t.watch == nil {
		return
	}
	t.watch.rd.Close()
	<-t.wdone
	t.objs.releaseAll()
	t.closer.wait()
	t.watch.close()
	t.watch = nil
}

// Close stops following: every link is released, and the processes still
// traced are detached and run on. A launched command still running is
// reaped in the background when it exits. It returns why the tracer
// stopped early, if it did.
func (t *Tree) Close() error {
	t.stopOnce.Do(func() {
		t.closed.Store(true)
		if t.watch != nil {
			// No more stops at link-map changes: after the tracer is
			// gone, a SIGSTOP would stop the process for good.
			t.mu.Lock()
			for pid := range t.members {
				t.watch.unfollow(pid)
			}
			t.mu.Unlock()
		}
		close(t.stop)
		<-t.done
		if t.cmd != nil && !t.rootReaped {
			// The root outlived the tracer: reap it when it exits.
			go t.cmd.Wait()
		}
	})
	<-t.done
	t.closeWatch()
	t.closer.wait()
	return t.loopErr
}
