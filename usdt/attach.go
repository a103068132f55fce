package usdt

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/cilium/ebpf"

	"github.com/probekit/probekit/attach"
	"github.com/probekit/probekit/internal/features"
	"github.com/probekit/probekit/procmaps"
	"github.com/probekit/probekit/semaphore"
)

// Attach attaches prog to the USDT probe provider:name of target: a path,
// a program on PATH or a library name ("libc.so.6"), resolved as
// procmaps.Resolve does, or with a PID as that process sees it; SelfExe
// ("/proc/self/exe") is the executable of that process. provider
// and name may be globs ("function__*"); a probe with several locations
// is attached at each. On error nothing stays attached, and the error
// names target as given.
func (a *Attacher) Attach(prog *ebpf.Program, target, provider, name string, opts *Options) (*Link, error) {
	if prog == nil {
		return nil, errors.New("usdt: nil program")
	}
	if opts == nil {
		opts = &Options{}
	}
	if target == "" && opts.PID == 0 && opts.Process == nil {
		return nil, errors.New("usdt: attach needs a target, a PID or both")
	}
	proc, err := openProcess(opts)
	if err != nil {
		return nil, err
	}
	objs, err := a.objects(proc, target, provider, name)
	if err != nil {
		return nil, err
	}
	defer closeObjects(objs)

	refCtrOK, err := features.Have(features.RefCtr)
	if err != nil {
		return nil, fmt.Errorf("probe ref_ctr_offset support: %w", err)
	}
	userSema := opts.UserSemaphores || !refCtrOK
	if userSema && proc == nil {
		if err := semaphoreNeedsPID(objs); err != nil {
			return nil, err
		}
	}

	h := &holding{attacher: a}
	l, err := a.attach(h, prog, proc, objs, opts, userSema)
	if err != nil {
		return nil, errors.Join(err, h.release())
	}
	l.OnClose(h.release)
	if !userSema && proc != nil {
		guardKernelSemaphores(l, proc, objs)
	}
	return l, nil
}

// guardKernelSemaphores makes l, before it detaches, set to 1 each
// semaphore of proc that the kernel raised for it and that reads 0 then
// (semaphore.RestoreForDetach): the kernel would otherwise fail to lower
// it and keep the uprobe on the file for good. Semaphores of processes
// the attach does not name (path-wide) cannot be looked at.
func guardKernelSemaphores(l *Link, proc *procmaps.Process, objs []object) {
	var addrs []uint64
	for _, o := range objs {
		if o.mapped == nil {
			continue
		}
		for _, p := range o.probes {
			for i := range p.Locations {
				if p.Locations[i].Semaphore == 0 {
					continue
				}
				if a, err := o.semaphoreAddress(&p.Locations[i]); err == nil && !slices.Contains(addrs, a) {
					addrs = append(addrs, a)
				}
			}
		}
	}
	if len(addrs) == 0 {
		return
	}
	p := *proc
	// The memory raised, so that memory reused by detach time (the
	// object dlclose'd, the process exec'd) is not written.
	sites := make([]semaphore.Site, len(addrs))
	for i, a := range addrs {
		sites[i], _ = semaphore.SiteOf(&p, a)
	}
	l.BeforeDetach(func() {
		for i, a := range addrs {
			semaphore.RestoreSite(&p, a, sites[i]) // an exited process needs nothing
		}
	})
}

// semaphoreNeedsPID refuses, before anything is attached, a path-wide
// attach of a probe with a semaphore that the kernel cannot manage.
func semaphoreNeedsPID(objs []object) error {
	for _, o := range objs {
		for _, p := range o.probes {
			for _, loc := range p.Locations {
				if loc.Semaphore != 0 {
					return fmt.Errorf("USDT %s:%s in %s has a semaphore and the kernel cannot manage it (ref_ctr_offset needs Linux 4.20): attach with a PID to raise it from user space: %w",
						p.Provider, p.Name, o.name, ebpf.ErrNotSupported)
				}
			}
		}
	}
	return nil
}

// attach plans the specs, takes what the sites hold, and places the
// uprobes through the attach core.
func (a *Attacher) attach(h *holding, prog *ebpf.Program, proc *procmaps.Process, objs []object, opts *Options, userSema bool) (*Link, error) {
	sites, err := a.plan(h, objs, opts, userSema)
	if err != nil {
		return nil, err
	}
	if userSema {
		if err := h.raiseSemaphores(proc, sites); err != nil {
			return nil, err
		}
	}
	if !a.cookie {
		pid := 0
		if proc != nil {
			pid = proc.PID
		}
		if err := h.mapIPs(sites, pid); err != nil {
			return nil, err
		}
	}
	// One attach.File per object: the core makes one uprobe_multi link
	// of it, or one perf-event uprobe per location.
	var files []attach.File
	for i, s := range sites {
		if i == 0 || s.obj != sites[i-1].obj {
			files = append(files, attach.File{Path: s.obj.kernelPath(), Name: s.obj.name})
		}
		f := &files[len(files)-1]
		site := attach.Site{Probe: "USDT " + s.probe.String(), Offset: s.loc.FileOffset, RefCtrOffset: s.refCtr}
		if a.cookie {
			site.Cookie = uint64(s.specID)
		}
		f.Sites = append(f.Sites, site)
	}
	pid := 0
	if proc != nil {
		pid = proc.PID
	}
	return attach.Attach(prog, files, &attach.Options{PID: pid, Warnings: h.warnings})
}

// AutoAttach attaches every program of coll whose section names its probe,
// SEC("usdt/TARGET:PROVIDER:NAME") as libbpf writes it (TARGET a path, a
// program on PATH or a library name), to every process (or opts.PID). It
// returns the links in program-name order of spec; on error nothing stays
// attached.
func (a *Attacher) AutoAttach(spec *ebpf.CollectionSpec, coll *ebpf.Collection, opts *Options) ([]*Link, error) {
	var links []*Link
	names := make([]string, 0, len(spec.Programs))
	for n := range spec.Programs {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		ps := spec.Programs[n]
		if !strings.HasPrefix(ps.SectionName, "usdt/") && !strings.HasPrefix(ps.SectionName, "usdt.s/") {
			continue
		}
		_, rest, _ := strings.Cut(ps.SectionName, "/")
		file, provider, name, err := ParseSection(rest)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("program %s: %w", n, err), closeAll(links))
		}
		l, err := a.Attach(coll.Programs[n], file, provider, name, opts)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("program %s: %w", n, err), closeAll(links))
		}
		links = append(links, l)
	}
	return links, nil
}

// ParseSection splits "TARGET:PROVIDER:NAME" (the part of a SEC("usdt/...")
// name after the slash, or a probekit trace PROBE). The target may contain
// colons; the last two fields are the provider and the name.
func ParseSection(s string) (file, provider, name string, err error) {
	i := strings.LastIndexByte(s, ':')
	if i <= 0 {
		return "", "", "", fmt.Errorf("%q: want TARGET:PROVIDER:NAME", s)
	}
	j := strings.LastIndexByte(s[:i], ':')
	if j <= 0 || j == i-1 || i == len(s)-1 {
		return "", "", "", fmt.Errorf("%q: want TARGET:PROVIDER:NAME", s)
	}
	return s[:j], s[j+1 : i], s[i+1:], nil
}

func closeAll(links []*Link) error {
	var errs []error
	for _, l := range links {
		errs = append(errs, l.Close())
	}
	return errors.Join(errs...)
}
