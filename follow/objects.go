package follow

import (
	"errors"
	"fmt"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/probekit/probekit/attach"
	"github.com/probekit/probekit/internal/glob"
	"github.com/probekit/probekit/procmaps"
	"github.com/probekit/probekit/uprobe"
	"github.com/probekit/probekit/usdt"
)

// Selector reports whether target selects objects by pattern instead of
// naming one file: "*" (every object), or a glob of a path ("/opt/*/bin/*")
// or of a base name ("python3*", "libc.so*").
func Selector(target string) bool { return !glob.Literal(target) }

// selects reports whether the object at objPath (as its process sees it)
// matches target: a pattern with a '/' matches the whole path, one without
// the base name.
func selects(target, objPath string) bool {
	if target == "*" {
		return true
	}
	if strings.ContainsRune(target, '/') {
		return glob.Match(target, objPath)
	}
	return glob.Match(target, path.Base(objPath))
}

// loaderGlob is the base name of a dynamic linker (glibc's
// ld-linux-x86-64.so.2, ld-linux-aarch64.so.1, musl's ld-musl-*.so.1):
// its _dl_debug_state runs after each change of the link map.
const loaderGlob = "ld-*.so*"

// loaderSymbol is the function glibc's and musl's dynamic linkers call
// after mapping or unmapping objects (the r_debug breakpoint, <link.h>).
const loaderSymbol = "_dl_debug_state"

// loaderProbe names the watcher's own probe in failures.
var loaderProbe = Probe{Target: "ld.so", Function: loaderSymbol}

// fileKey is one attachment unit: a file, path-wide (pid 0) or in one
// process.
type fileKey struct {
	id  procmaps.FileID
	pid int
}

// fileState is what is attached to one file (links of the probes that it
// has; none when it has none, kept so that it is not parsed again), and
// the processes using it.
type fileState struct {
	name  string
	links []*attach.Link
	which []*Probe
	pids  map[int]struct{}
	// loader is the link of watch_map on a dynamic linker.
	loader *attach.Link
	// idle counts the times the file was left without a process: the
	// generation of its pending expiry.
	idle uint64
}

// objects keeps the selector probes attached to the objects processes
// map: one attachment per file path-wide (host scope), or per file and
// process.
type objects struct {
	probes   []*Probe
	att      *usdt.Attacher
	pathWide bool
	notify   func(Event)
	// loaderProg, when set, is attached at loaderSymbol of each dynamic
	// linker seen.
	loader func(b *uprobe.Binary, pid int) (*attach.Link, error)
	closer *closer

	mu    sync.Mutex
	files map[fileKey]*fileState
	procs map[int][]fileKey
	// found counts, per probe, the files that have it; selected the
	// files its target selected (for Missing).
	found, selected map[*Probe]int
}

func newObjects(probes []*Probe, att *usdt.Attacher, pathWide bool, notify func(Event), c *closer) *objects {
	return &objects{
		probes: probes, att: att, pathWide: pathWide, notify: notify, closer: c,
		files: map[fileKey]*fileState{}, procs: map[int][]fileKey{},
		found: map[*Probe]int{}, selected: map[*Probe]int{},
	}
}

// reportMissing sends Missing once for each probe that no file scanned so
// far has, and forgets the counts.
func (o *objects) reportMissing() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, p := range o.probes {
		if o.found[p] > 0 {
			continue
		}
		var err error
		if p.Function != "" {
			err = fmt.Errorf("no function matches %q in the %d objects mapped now that %q selects: %w", p.Function, o.selected[p], p.Target, uprobe.ErrNotFound)
		} else {
			err = fmt.Errorf("no USDT probe %s:%s in the %d objects mapped now that %q selects: %w", p.Provider, p.Name, o.selected[p], p.Target, usdt.ErrNotFound)
		}
		o.notify(Event{Kind: Missing, Probe: p, Err: err})
	}
	o.found, o.selected = nil, nil
}

// scan brings proc's attachments in line with what it maps now.
func (o *objects) scan(proc *procmaps.Process) {
	if o.scanOnce(proc) {
		// A dynamic linker was attached just now: what it mapped before
		// its probe was in place is read again; what it maps after fires
		// the probe.
		o.scanOnce(proc)
	}
}

// scanOnce is scan; it reports whether it attached a dynamic linker.
func (o *objects) scanOnce(proc *procmaps.Process) (newLoader bool) {
	objs, err := proc.Objects()
	if err != nil {
		return false // gone: its exit drops it
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	var keys []fileKey
	for i := range objs {
		obj := &objs[i]
		key := fileKey{id: obj.ID()}
		if !o.pathWide {
			key.pid = proc.PID
		}
		keys = append(keys, key)
		if fs := o.files[key]; fs != nil {
			if _, ok := fs.pids[proc.PID]; !ok {
				fs.pids[proc.PID] = struct{}{}
				o.joined(proc.PID, fs)
			}
			continue
		}
		fs := o.attachObject(proc, obj, key)
		o.files[key] = fs
		o.joined(proc.PID, fs)
		newLoader = newLoader || fs.loader != nil
	}
	o.dropKeys(proc.PID, keys, false, o.closer.close)
	o.procs[proc.PID] = keys
	return newLoader
}

// joined sends Joined for a process newly using a path-wide attached
// file.
func (o *objects) joined(pid int, fs *fileState) {
	if o.pathWide && len(fs.links) > 0 {
		o.notify(Event{Kind: Joined, PID: pid, File: fs.name, Sites: fs.sites()})
	}
}

func (fs *fileState) sites() int {
	n := 0
	for _, l := range fs.links {
		n += len(l.Sites())
	}
	return n
}

// drop forgets pid (exited), releasing the files no process uses now.
func (o *objects) drop(pid int) {
	o.dropWith(pid, o.closer.close)
}

// dropWith is drop, closing each link of pid's own files with
// closeLink.
func (o *objects) dropWith(pid int, closeLink func(*attach.Link)) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.dropKeys(pid, nil, true, closeLink)
	delete(o.procs, pid)
}

// lingerFor is how long a file no process maps stays attached. A file
// mapped again meanwhile (a program run over and over, a library loaded
// again) keeps its links: it is neither attached twice (a link being
// closed fires until the kernel is done with it, so a new one would count
// the first hits twice) nor missed while being attached again.
const lingerFor = time.Second

// dropKeys removes pid from the files it used but not in keep. A file
// left without a process lingers (lingerFor), unless it was pid's own
// (per-process attachment) and pid exited.
func (o *objects) dropKeys(pid int, keep []fileKey, exited bool, closeLink func(*attach.Link)) {
	kept := make(map[fileKey]bool, len(keep))
	for _, k := range keep {
		kept[k] = true
	}
	for _, k := range o.procs[pid] {
		if kept[k] {
			continue
		}
		fs := o.files[k]
		if fs == nil {
			continue
		}
		delete(fs.pids, pid)
		if o.pathWide && len(fs.links) > 0 {
			o.notify(Event{Kind: Left, PID: pid, File: fs.name, Sites: fs.sites()})
		}
		if len(fs.pids) > 0 {
			continue
		}
		if exited && k.pid != 0 {
			delete(o.files, k)
			o.releaseFileWith(pid, fs, closeLink)
			continue
		}
		fs.idle++
		gen := fs.idle
		time.AfterFunc(lingerFor, func() { o.expire(k, fs, gen, pid) })
	}
}

// expire releases fs if no process has mapped it since it went idle
// (generation gen).
func (o *objects) expire(k fileKey, fs *fileState, gen uint64, pid int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.files[k] != fs || fs.idle != gen || len(fs.pids) > 0 {
		return
	}
	delete(o.files, k)
	o.releaseFile(pid, fs)
}

func (o *objects) releaseFile(pid int, fs *fileState) {
	o.releaseFileWith(pid, fs, o.closer.close)
}

func (o *objects) releaseFileWith(pid int, fs *fileState, closeLink func(*attach.Link)) {
	for i, l := range fs.links {
		o.notify(Event{Kind: Detached, PID: pid, Probe: fs.which[i], File: fs.name, Sites: len(l.Sites())})
		closeLink(l)
	}
	if fs.loader != nil {
		closeLink(fs.loader)
	}
}

// releaseAll releases every file.
func (o *objects) releaseAll() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for k, fs := range o.files {
		delete(o.files, k)
		o.releaseFile(k.pid, fs)
	}
	clear(o.procs)
}

// sites counts the locations attached.
func (o *objects) sites() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, fs := range o.files {
		n += fs.sites()
	}
	return n
}

// attachObject attaches the probes that select obj and that it has.
func (o *objects) attachObject(proc *procmaps.Process, obj *procmaps.Object, key fileKey) *fileState {
	fs := &fileState{name: obj.Path, pids: map[int]struct{}{proc.PID: {}}}
	var want []*Probe
	for _, p := range o.probes {
		if p.file == obj.ID() || p.file == (procmaps.FileID{}) && selects(p.Target, obj.Path) {
			want = append(want, p)
			if o.selected != nil {
				o.selected[p]++
			}
		}
	}
	isLoader := o.loader != nil && glob.Match(loaderGlob, path.Base(obj.Path))
	if len(want) == 0 && !isLoader {
		return fs
	}
	f, err := proc.OpenObject(obj)
	if err != nil {
		for _, p := range want {
			o.notify(Event{Kind: Failed, PID: proc.PID, Probe: p, File: obj.Path, Err: err})
		}
		return fs
	}
	defer f.Close()
	// Path-wide: the kernel gets the descriptor that was opened and
	// checked (device and inode), whatever root the process has.
	target := fmt.Sprintf("/proc/self/fd/%d", f.Fd())
	var opened *usdt.File
	for _, p := range want {
		var l *attach.Link
		var err error
		if p.Function == "" {
			if opened == nil {
				// Parsed once per file while it is attached (no
				// cache: a host sees new files without end).
				if opened, err = usdt.Parse(f); err != nil {
					opened = &usdt.File{}
				}
			}
			if len(opened.Match(p.Provider+":"+p.Name)) == 0 {
				continue // the file does not have it: nothing to say
			}
			opts := &usdt.Options{Cookie: p.Cookie, LocationCookie: p.LocationCookie}
			if o.pathWide {
				l, err = o.att.Attach(p.Program, target, p.Provider, p.Name, opts)
			} else {
				opts.Process = proc
				l, err = o.att.Attach(p.Program, obj.Path, p.Provider, p.Name, opts)
			}
		} else {
			l, err = o.attachFunctions(p, proc, target, key.pid)
			if err == nil && l == nil {
				continue
			}
		}
		if o.found != nil {
			o.found[p]++ // has it, attached or not
		}
		if err != nil {
			o.notify(Event{Kind: Failed, PID: proc.PID, Probe: p, File: obj.Path, Err: err})
			continue
		}
		fs.links = append(fs.links, l)
		fs.which = append(fs.which, p)
		o.notify(Event{Kind: Attached, PID: proc.PID, Probe: p, File: obj.Path, Sites: len(l.Sites())})
	}
	if isLoader {
		b, err := uprobe.Open(target)
		if err == nil {
			fs.loader, err = o.loader(b, key.pid)
			b.Close()
		}
		if err != nil && proc.Check() == nil {
			// Its process's later libraries are not seen until its next
			// exec: say so (unless it has exited meanwhile, which is
			// why the attach of its PID failed).
			o.notify(Event{Kind: Failed, PID: proc.PID, Probe: &loaderProbe, File: obj.Path, Err: err})
		}
	}
	return fs
}

// attachFunctions attaches a function probe to the functions of target
// that match; nil when none does.
func (o *objects) attachFunctions(p *Probe, proc *procmaps.Process, target string, pid int) (*attach.Link, error) {
	b, err := uprobe.Open(target)
	if err != nil {
		return nil, err
	}
	defer b.Close()
	fns, err := b.Resolve(p.Function)
	if errors.Is(err, uprobe.ErrNotFound) {
		return nil, nil // the file does not have it
	}
	if err != nil {
		return nil, err
	}
	opts := &uprobe.Options{PID: pid, Cookie: p.Cookie, FunctionCookie: p.FunctionCookie, Skip: p.Skip, AddressTable: p.AddressTable}
	if p.Return {
		return b.Returns(fns, p.Program, opts)
	}
	return b.Entries(fns, p.Program, opts)
}

// closer closes links in the background, a bounded number at once:
// closing a uprobe link waits for the kernel's RCU grace periods.
type closer struct {
	wg    sync.WaitGroup
	slots chan struct{}
}

func newCloser() *closer { return &closer{slots: make(chan struct{}, maxClosing)} }

func (c *closer) close(l *attach.Link) {
	c.slots <- struct{}{}
	c.wg.Go(func() {
		l.Close()
		<-c.slots
	})
}

func (c *closer) wait() { c.wg.Wait() }
