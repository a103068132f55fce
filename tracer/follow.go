package tracer

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"

	"github.com/cilium/ebpf/ringbuf"

	"github.com/probekit/probekit/follow"
	"github.com/probekit/probekit/internal/jsontext"
	"github.com/probekit/probekit/probe"
	"github.com/probekit/probekit/procmaps"
	"github.com/probekit/probekit/record"
	"github.com/probekit/probekit/usdt"
)

// attachFollowed is the attach phase of trace -f, of "*" and glob
// targets and of a host-wide trace without BPF cookies: the probes are
// kept attached in every process of the tree of -p PID or of the
// launched command, or of the host (package follow), and each attach
// and release is printed among the hits.
func (tr *Trace) attachFollowed() error {
	t, objs, att, proc := tr.t, tr.objs, tr.att, tr.plan.cfg.Process
	// With --stack, a process of a tree is read at its start, execs and
	// exit (follow.Options.Hold); the process of -p PID with a selector
	// target at the start and at each change of its link map; the
	// host's processes at their first hit (in --count, when the counts
	// are printed), so one that exits before has its frames by address
	// only.
	if err := checkTargetMachines(t.cfg); err != nil {
		return err
	}
	selectors := followSelectors(t.cfg)
	switch {
	case selectors && len(t.cfg.Command) > 0 && !t.cfg.Follow:
		return errors.New("a target \"*\" or a glob with -- CMD needs -f")
	}
	var probes []follow.Probe
	var dyn *dynamicSites
	if selectors {
		// Objects come and go: sites are made as they are attached,
		// while the loop reads them.
		t.sitesMu = &sync.RWMutex{}
		dyn = &dynamicSites{t: t, idx: map[string]uint64{}}
	}
	for _, p := range t.cfg.Probes {
		if p.Kind != record.KindUSDT {
			if dyn != nil {
				return errors.New("targets \"*\" and globs take USDT probes; uprobe and uretprobe need a named target")
			}
			fp, err := t.followFuncSites(p, objs)
			if err != nil {
				return err
			}
			probes = append(probes, fp)
			continue
		}
		fp := follow.Probe{Target: p.Target, Provider: p.Provider, Name: p.Name, Program: objs.Program}
		if dyn != nil {
			fp.LocationCookie = dyn.cookie
		} else {
			// Every site gets its cookie now, before any process runs:
			// the loop reads t.sites unlocked.
			cookies, err := t.followSites(p)
			if err != nil {
				return err
			}
			fp.LocationCookie = cookies.of
		}
		fp.LocationCookie = t.latencyCookie(p, fp.LocationCookie)
		probes = append(probes, fp)
	}
	if t.cfg.Mode == record.ModeCount && len(t.sites) > record.MaxCounted {
		return fmt.Errorf("--count counts at most %d probe sites, these probes have %d", record.MaxCounted, len(t.sites))
	}
	// Notifications come from the tree's goroutine, hits from the loop:
	// both write through one lock.
	w := &lockedWriter{w: t.out.w, holdDetach: t.cfg.Mode == record.ModeEvents}
	t.out.w = w
	opts := &follow.Options{Attacher: att, Notify: func(e follow.Event) { t.printFollow(w, e) }}
	if t.stacks != nil {
		// The tree's processes are read at their start, execs and exit
		// (names that outlive them); a watch's at their first hit.
		opts.Hold = t.stacks.watch
	}

	if t.cfg.Mode == record.ModeEvents {
		rd, err := ringbuf.NewReader(objs.Events)
		if err != nil {
			return err
		}
		tr.onRelease(func() { rd.Close() })
		tr.rd = rd
	}
	var f interface {
		Exited() <-chan struct{}
		Close() error
	}
	// Armed before the first process is attached: each is attached
	// (and reported) as a whole, at its own time, and records from then.
	if err := objs.Arm(); err != nil {
		return err
	}
	exitErr := func() error { return nil }
	var root *os.Process // the launched command
	var err error
	switch {
	case len(t.cfg.Command) > 0:
		var tree *follow.Tree
		cmd := launchCommand(t.cfg)
		if tree, err = follow.Launch(cmd, probes, opts); err == nil {
			f, exitErr, root = tree, tree.ExitErr, cmd.Process
		}
	case t.cfg.Follow:
		if ownChild(proc.PID) {
			// The kernel lets a parent whose thread group traces the
			// child take the child's trace stops in a plain wait(2):
			// one taken by the caller's wait is never resumed.
			t.warnf("pid %d is a child of this process: while Follow traces it, do not wait for it (os/exec's Wait): a wait would take its trace stops and leave it stopped; Config.Command launches and waits for a command safely", proc.PID)
		}
		f, err = follow.Attach(proc, probes, opts)
	case proc != nil:
		f, err = t.watchProcess(proc, probes, opts)
	default:
		f, err = follow.WatchHost(probes, opts)
	}
	if err != nil {
		return err
	}
	tr.cleanups = append(tr.cleanups, func(err error) error {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		w.Flush() // the releases of Close
		return err
	})
	if root != nil {
		// Before Close: the tree sees the command's exit, which Close
		// would no longer wait for.
		tr.onRelease(func() { endCommand(root, f.Exited()) })
	}
	tr.exited = make(chan error, 1)
	// A host watch's Exited is never closed: the goroutine ends with
	// the trace too.
	over := make(chan struct{})
	tr.onRelease(func() { close(over) })
	go func() {
		select {
		case <-f.Exited():
			tr.exited <- exitErr()
		case <-over:
		}
	}()
	return nil
}

// watchProcess follows the objects of -p PID (a target "*" or a glob,
// without -f): the process alone, seized as by -f, so that a library it
// dlopens is attached before its dlopen returns (its first hits are
// seen). A process that cannot be seized (traced already, by a debugger
// or strace; ptrace forbidden) is watched instead, with a warning: a
// library's hits in the milliseconds after its dlopen may be missed. So
// is a child of this process, which is never seized.
func (t *tracer) watchProcess(proc *procmaps.Process, probes []follow.Probe, opts *follow.Options) (interface {
	Exited() <-chan struct{}
	Close() error
}, error) {
	if ownChild(proc.PID) {
		// Its parent's waits are this process's: the kernel lets a
		// parent whose thread group traces the child take the child's
		// trace stops in a plain wait(2) (os/exec's Wait does), and
		// the stop taken would never be resumed.
		return follow.WatchProcess(proc, probes, opts)
	}
	seized := *opts
	seized.ProcessOnly = true
	tree, err := follow.Attach(proc, probes, &seized)
	if err == nil {
		return tree, nil
	}
	if !errors.Is(err, syscall.EPERM) {
		return nil, err
	}
	t.warnf("pid %d: %v; watching it without ptrace: the hits of a library in the milliseconds after its dlopen may be missed", proc.PID, err)
	return follow.WatchProcess(proc, probes, opts)
}

// launchCommand is the command of -- CMD, its program found as for
// TARGET: an ELF binary on PATH over a wrapper script (pyenv's shim would
// exec another python than the one whose probes were named).
func launchCommand(cfg *Config) *exec.Cmd {
	// exec.Command finds Command[0] on PATH as the shell does
	// (checkCommand warns when that file lacks the probes).
	cmd := exec.Command(cfg.Command[0], cfg.Command[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if cfg.JSON {
		// Keep stdout a stream of JSON objects.
		cmd.Stdout = os.Stderr
	}
	return cmd
}

// followSelectors reports whether a probe's target is "*" or a glob.
func followSelectors(cfg *Config) bool {
	for _, p := range cfg.Probes {
		if follow.Selector(p.Target) {
			return true
		}
	}
	return false
}

// dynamicSites makes a site for each USDT location the first time an
// object with it is attached (once per provider, name and address: copies
// of one file share their sites).
type dynamicSites struct {
	t   *tracer
	idx map[string]uint64
}

func (d *dynamicSites) cookie(p *usdt.Probe, i int) uint64 {
	d.t.sitesMu.Lock()
	defer d.t.sitesMu.Unlock()
	k := locKey(p, i)
	if v, ok := d.idx[k]; ok {
		return v
	}
	v := d.t.cookie(p, i)
	d.idx[k] = v
	return v
}

// followFuncSites makes the sites of the functions p names in its target
// as the tracer sees it, and the probe that gives each its cookie.
func (t *tracer) followFuncSites(p probe.Spec, objs *record.Objects) (follow.Probe, error) {
	b, err := openFuncTarget(p.Target, nil)
	if err != nil {
		return follow.Probe{}, err
	}
	defer b.Close()
	fs, err := t.funcSites(b, p)
	if err != nil {
		return follow.Probe{}, err
	}
	return follow.Probe{
		Target: p.Target, Function: p.Func, Return: p.Kind == record.KindUretprobe, Program: objs.FuncProgram,
		FunctionCookie: fs.cookie, AddressTable: objs.FuncIPs,
	}, nil
}

// siteCookies maps a USDT location (provider, name, address) to the
// cookie of its site; read-only once built.
type siteCookies struct {
	byLoc map[string]uint64
	// byProbe is a site of each provider:name, for a process that sees
	// another copy of the file (its own root) with other addresses.
	byProbe map[string]uint64
}

func locKey(p *usdt.Probe, i int) string {
	return p.Provider + ":" + p.Name + "@" + strconv.FormatUint(p.Locations[i].Address, 16)
}

func (c *siteCookies) of(p *usdt.Probe, i int) uint64 {
	if v, ok := c.byLoc[locKey(p, i)]; ok {
		return v
	}
	return c.byProbe[p.Provider+":"+p.Name]
}

// followSites makes the sites of every location of p in its target as the
// tracer sees it.
func (t *tracer) followSites(p probe.Spec) (*siteCookies, error) {
	path, err := procmaps.Resolve(p.Target)
	if err != nil {
		return nil, err
	}
	f, err := usdt.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p.Target, err)
	}
	c := &siteCookies{byLoc: map[string]uint64{}, byProbe: map[string]uint64{}}
	for _, pr := range f.Match(p.Provider + ":" + p.Name) {
		for i := range pr.Locations {
			v := t.cookie(pr, i)
			c.byLoc[locKey(pr, i)] = v
			if _, ok := c.byProbe[pr.Provider+":"+pr.Name]; !ok {
				c.byProbe[pr.Provider+":"+pr.Name] = v
			}
		}
	}
	if len(c.byLoc) == 0 {
		return nil, fmt.Errorf("%s: no probe matches %s:%s: %w", p.Target, p.Provider, p.Name, usdt.ErrNotFound)
	}
	return c, nil
}

// printFollow prints an attach or a release: among the hits with
// --json,
//
//	{"kind":"attach","pid":PID,"file":FILE,"probe":PROBE,"sites":N}
//
// on standard error otherwise (standard output keeps the hits),
//
//	attach PID FILE PROBE (N sites)
//	detach PID FILE PROBE (N sites)
//	join PID FILE (N sites)
//	leave PID FILE (N sites)
//	missing PROBE: WHY
//
// and a failure as a warning on stderr. A host watch's join and leave
// (a process starting or ending its use of a file attached path-wide)
// concern the file's probes together: they have no probe, and their JSON
// line no "probe" member.
func (t *tracer) printFollow(w *lockedWriter, e follow.Event) {
	t.followed.note(e)
	if e.Kind == follow.Failed {
		t.warnf("pid %d: %s: %v", e.PID, e.Probe, e.Err)
		return
	}
	probe := ""
	if p := e.Probe; p != nil {
		probe = p.Provider + ":" + p.Name
		if p.Function != "" {
			probe = "uprobe:" + p.Function
			if p.Return {
				probe = "uretprobe:" + p.Function
			}
		}
	}
	var b []byte
	if t.cfg.JSON {
		b = append(b, `{"kind":`...)
		b = jsontext.Append(b, e.Kind.String(), false)
		b = fmt.Appendf(b, `,"pid":%d,"file":`, e.PID)
		b = jsontext.Append(b, e.File, false)
		if e.Probe != nil {
			b = append(b, `,"probe":`...)
			b = jsontext.Append(b, probe, false)
		}
		b = fmt.Appendf(b, `,"sites":%d}`+"\n", e.Sites)
	} else {
		switch {
		case e.Kind == follow.Missing:
			fmt.Fprintf(t.errOut, "%s %s: %s\n", e.Kind, Escape(probe), Escape(fmt.Sprint(e.Err)))
		case e.Probe == nil:
			fmt.Fprintf(t.errOut, "%s %d %s (%d sites)\n", e.Kind, e.PID, Escape(e.File), e.Sites)
		default:
			fmt.Fprintf(t.errOut, "%s %d %s %s (%d sites)\n", e.Kind, e.PID, Escape(e.File), Escape(probe), e.Sites)
		}
		return
	}
	if e.Kind == follow.Detached {
		w.holdLine(b)
		return
	}
	w.writeLine(b)
}

// lockedWriter serializes the writes of the loop and of the tree's
// notifications.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
	// holdDetach keeps release lines until the loop's next flush: the
	// process's last hits may still be in the ring or the loop's buffer
	// when it exits, and they come before its release.
	holdDetach bool
	held       []byte
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// Flush writes the held lines, then flushes the underlying writer when
// it buffers.
func (l *lockedWriter) Flush() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.held) > 0 {
		_, err := l.w.Write(l.held)
		l.held = l.held[:0]
		if err != nil {
			return err
		}
	}
	if f, ok := l.w.(interface{ Flush() error }); ok {
		return f.Flush()
	}
	return nil
}

// holdLine writes a release line at the next Flush (at once without
// holdDetach).
func (l *lockedWriter) holdLine(b []byte) {
	if !l.holdDetach {
		l.writeLine(b)
		return
	}
	l.mu.Lock()
	l.held = append(l.held, b...)
	l.mu.Unlock()
}

// writeLine writes one notification and flushes it.
func (l *lockedWriter) writeLine(b []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := l.w.Write(b); err != nil {
		return
	}
	if f, ok := l.w.(interface{ Flush() error }); ok {
		f.Flush()
	}
}

// ownChild reports whether pid's parent is this process.
func ownChild(pid int) bool {
	ppid, err := procmaps.ParentPID(pid)
	return err == nil && ppid == os.Getpid()
}
