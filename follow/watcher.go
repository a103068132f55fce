package follow

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/probekit/probekit/attach"
	"github.com/probekit/probekit/internal/features"
	"github.com/probekit/probekit/internal/glob"
	"github.com/probekit/probekit/procmaps"
	"github.com/probekit/probekit/uprobe"
)

// Kinds of watch_event (watch.c).
const (
	watchExec = 1
	watchExit = 2
	watchMap  = 3
)

// watcher runs watch.c: exec and exit of processes (raw tracepoints
// sched_process_exec and sched_process_exit, Linux 4.17), and each change
// of a process's objects (a uprobe at each dynamic linker's
// _dl_debug_state).
type watcher struct {
	objs  watchObjects
	links []link.Link
	rd    *ringbuf.Reader
}

// newWatcher loads watch.c: for every process (all), or for those in
// followed; stopOnMap stops a followed thread at each link-map change, for
// its tracer (a Tree).
func newWatcher(all, stopOnMap bool) (*watcher, error) {
	spec, err := loadWatch()
	if err != nil {
		return nil, err
	}
	if err := uprobe.Prepare(spec, "watch_map"); err != nil {
		return nil, err
	}
	for name, on := range map[string]bool{"watch_all": all, "stop_on_map": stopOnMap} {
		if on {
			if err := spec.Variables[name].Set(uint32(1)); err != nil {
				return nil, err
			}
		}
	}
	w := &watcher{}
	if err := spec.LoadAndAssign(&w.objs, nil); err != nil {
		return nil, fmt.Errorf("load the process watcher: %w", err)
	}
	for _, tp := range []struct {
		name string
		prog *ebpf.Program
	}{{"sched_process_exec", w.objs.WatchExec}, {"sched_process_exit", w.objs.WatchExit}} {
		l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: tp.name, Program: tp.prog})
		if err != nil {
			w.close()
			return nil, fmt.Errorf("raw tracepoint %s: %w", tp.name, err)
		}
		w.links = append(w.links, l)
	}
	if w.rd, err = ringbuf.NewReader(w.objs.WatchEvents); err != nil {
		w.close()
		return nil, err
	}
	return w, nil
}

// loader attaches watch_map at the dynamic linker b's _dl_debug_state, in
// process pid (0: every process).
func (w *watcher) loader(b *uprobe.Binary, pid int) (*attach.Link, error) {
	return b.Entry(loaderSymbol, w.objs.WatchMap, &uprobe.Options{PID: pid})
}

// follow and unfollow update the processes watched (without watch_all).
func (w *watcher) follow(pid int) error {
	return w.objs.Followed.Put(uint32(pid), uint8(1))
}

func (w *watcher) unfollow(pid int) { w.objs.Followed.Delete(uint32(pid)) }

// next returns the next event: a process and what happened to it.
func (w *watcher) next(rec *ringbuf.Record) (pid int, kind uint32, err error) {
	if err := w.rd.ReadInto(rec); err != nil {
		return 0, 0, err
	}
	if len(rec.RawSample) < 8 {
		return 0, 0, fmt.Errorf("watch event of %d bytes", len(rec.RawSample))
	}
	return int(binary.NativeEndian.Uint32(rec.RawSample)), binary.NativeEndian.Uint32(rec.RawSample[4:]), nil
}

// lost is the number of events the ring had no room for.
func (w *watcher) lost() uint64 {
	var n uint64
	w.objs.WatchLost.Lookup(uint32(0), &n)
	return n
}

func (w *watcher) close() {
	if w.rd != nil {
		w.rd.Close()
	}
	for _, l := range w.links {
		l.Close()
	}
	w.objs.Close()
}

// Watch keeps selector probes (Probe.Target "*" or a glob) attached to
// the objects of one process, or of every process on the host, as they
// exec, load libraries (dlopen) and exit.
//
// Host scope attaches once per file (device and inode), path-wide: every
// process that maps the file, now and later, is covered, and the
// attachment goes when the last process using the file exits or execs.
// A new file (a binary first run, a copy of one in a container, a library
// loaded later) is attached when its process's exec or dynamic-linker
// event reaches the watcher: hits of that file in the milliseconds before
// are missed, unlike in a launched Tree. A process that loads objects
// without a dynamic linker (a static binary's own mmap) is rescanned only
// at exec.
type Watch struct {
	w       *watcher
	o       *objects
	closer  *closer
	pid     int // 0: host
	exited  chan struct{}
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once // closes exited
	loopErr error

	closeOnce sync.Once
	// cgroup selects the processes by cgroup path (Options.Cgroup).
	cgroup string
	// hold is Options.Hold, called for the process of WatchProcess
	// (not for the host's: it would read every process).
	hold func(*procmaps.Process)
}

// WatchHost follows every process on the host: see Watch.
func WatchHost(probes []Probe, opts *Options) (*Watch, error) {
	return newWatch(nil, probes, opts)
}

// WatchProcess follows the objects of process proc, now and later. A
// proc whose PID another process has now is refused
// (procmaps.ErrProcessChanged).
func WatchProcess(proc *procmaps.Process, probes []Probe, opts *Options) (*Watch, error) {
	if proc == nil || proc.PID <= 0 {
		return nil, errors.New("follow: WatchProcess needs a process")
	}
	return newWatch(proc, probes, opts)
}

// newWatch watches proc's objects, or with proc nil every process's.
func newWatch(proc *procmaps.Process, probes []Probe, opts *Options) (*Watch, error) {
	pid := 0
	if proc != nil {
		pid = proc.PID
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	var ps []*Probe
	for _, p := range probes {
		if err := p.check(o.Attacher != nil); err != nil {
			return nil, err
		}
		if pid == 0 && !Selector(p.Target) {
			// A named file: the one the caller sees, wherever a
			// process maps it from.
			p = p.realTarget()
		}
		ps = append(ps, &p)
	}
	if len(ps) == 0 {
		return nil, errors.New("follow: no probe")
	}
	notify := o.Notify
	if notify == nil {
		notify = func(Event) {}
	}
	// A host watch attaches each file once, path-wide; without BPF
	// cookies a position-independent file's sites are found by their
	// runtime address in a process (usdt.bpf.h's and record's address
	// tables), so it attaches per process and file instead, as a
	// cgroup's watch does.
	cookie, err := features.Have(features.Cookie)
	if err != nil {
		return nil, fmt.Errorf("follow: probe BPF cookie support: %w", err)
	}
	wt, err := newWatcher(pid == 0, false)
	if err != nil {
		return nil, err
	}
	c := newCloser()
	w := &Watch{w: wt, closer: c, pid: pid, exited: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	w.cgroup = o.Cgroup
	if pid != 0 {
		w.hold = o.Hold
	}
	w.o = newObjects(ps, o.Attacher, pid == 0 && o.Cgroup == "" && cookie, notify, c)
	w.o.loader = wt.loader
	if pid != 0 {
		if err := wt.follow(pid); err != nil {
			wt.close()
			return nil, err
		}
		// Followed from now on: the identity holds for what the
		// watcher saw since.
		if err := proc.Check(); err != nil {
			wt.close()
			return nil, err
		}
		if w.hold != nil {
			// Before the attach: no hit comes before it is read.
			w.hold(proc)
		}
		w.o.scan(proc)
	} else {
		// Events from now on are queued in the ring while the processes
		// alive are scanned.
		for _, p := range allPIDs() {
			w.scan(p)
		}
	}
	w.o.reportMissing()
	go w.loop()
	return w, nil
}

// allPIDs lists the processes in /proc.
func allPIDs() []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil && n != os.Getpid() {
			pids = append(pids, n)
		}
	}
	return pids
}

// sweepEvery is how often the loop checks whether the kernel lost events
// (a full ring), and if so looks for processes that exited unseen.
const sweepEvery = time.Second

func (w *Watch) loop() {
	defer close(w.done)
	var rec ringbuf.Record
	var lost uint64
	for {
		w.w.rd.SetDeadline(time.Now().Add(sweepEvery))
		pid, kind, err := w.w.next(&rec)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			if n := w.w.lost(); n != lost {
				lost = n
				w.sweep()
			}
			continue
		}
		if err != nil {
			if !errors.Is(err, ringbuf.ErrClosed) {
				w.loopErr = err
			}
			return
		}
		if w.pid != 0 && pid != w.pid {
			continue
		}
		switch kind {
		case watchExit:
			w.o.drop(pid)
			if pid == w.pid {
				w.once.Do(func() { close(w.exited) })
			}
		case watchExec, watchMap:
			w.scan(pid)
		}
	}
}

// sweep drops the processes that are gone (their exit event was lost) and
// rescans the live ones (their exec or library events may be lost too).
func (w *Watch) sweep() {
	w.o.mu.Lock()
	pids := make([]int, 0, len(w.o.procs))
	for pid := range w.o.procs {
		pids = append(pids, pid)
	}
	w.o.mu.Unlock()
	for _, pid := range pids {
		_, err := procmaps.Open(pid)
		if err != nil {
			w.o.drop(pid)
			if pid == w.pid {
				w.once.Do(func() { close(w.exited) })
			}
			continue
		}
		w.scan(pid)
	}
}

// scan brings pid's attachments in line with what it maps, if it is in the
// scope; a process that left the cgroup is dropped.
func (w *Watch) scan(pid int) {
	if w.cgroup != "" && !inCgroup(pid, w.cgroup) {
		w.o.drop(pid)
		return
	}
	if proc, err := procmaps.Open(pid); err == nil {
		if w.hold != nil && pid == w.pid {
			w.hold(proc)
		}
		w.o.scan(proc)
	}
}

// inCgroup reports whether a cgroup path of pid (any hierarchy of
// /proc/PID/cgroup, lines "ID:CONTROLLERS:PATH") matches pattern.
func inCgroup(pid int, pattern string) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return false
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		_, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		if _, path, ok := strings.Cut(rest, ":"); ok && glob.Match(pattern, path) {
			return true
		}
	}
	return false
}

// Exited is closed when the process of WatchProcess exits; never for the
// host scope.
func (w *Watch) Exited() <-chan struct{} { return w.exited }

// Sites is the number of probe locations attached now.
func (w *Watch) Sites() int { return w.o.sites() }

// Files is the number of files attached (with at least one probe) now.
func (w *Watch) Files() int {
	w.o.mu.Lock()
	defer w.o.mu.Unlock()
	n := 0
	for _, fs := range w.o.files {
		if len(fs.links) > 0 {
			n++
		}
	}
	return n
}

// Lost is the number of process events the kernel could not queue (the
// processes concerned were not rescanned).
func (w *Watch) Lost() uint64 { return w.w.lost() }

// Close releases every link and the watcher. Later calls do nothing.
func (w *Watch) Close() error {
	w.closeOnce.Do(func() {
		w.w.rd.Close()
		<-w.done
		w.o.releaseAll()
		w.closer.wait()
		w.w.close()
	})
	return w.loopErr
}
