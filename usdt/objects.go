package usdt

// The target phase of an attach: which files, opened how, and which of
// their probes. Every file is opened once (procmaps' target model:
// regular files only, never blocking, inside a process's root), parsed
// from that descriptor, and given to the kernel as /proc/self/fd/N of it.

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/probekit/probekit/attach"
	"github.com/probekit/probekit/procmaps"
)

// object is one file to attach in, with the probes matched in it.
type object struct {
	file *File
	// name is the file as errors and Sites show it: the target as given,
	// or the path the process maps.
	name string
	// fd is the open file; the kernel gets its /proc/self/fd name.
	fd *os.File
	// mapped is the process's mapping of the file, nil for a path-wide
	// attach or a file the process has not mapped (yet).
	mapped *procmaps.Object
	probes []*Probe
}

func (o *object) kernelPath() string { return fmt.Sprintf("/proc/self/fd/%d", o.fd.Fd()) }

// semaphoreAddress is the runtime address of loc's semaphore in the
// process that maps o: the mapping of the file that holds its file
// offset (o.mapped must be set).
func (o *object) semaphoreAddress(loc *Location) (uint64, error) {
	return o.mapped.Address(loc.SemaphoreOffset, procmaps.Write)
}

func closeObjects(objs []object) {
	for _, o := range objs {
		o.fd.Close()
	}
}

func openProcess(opts *Options) (*procmaps.Process, error) {
	switch {
	case opts.Process != nil:
		if opts.PID != 0 && opts.PID != opts.Process.PID {
			return nil, fmt.Errorf("usdt: Options.PID %d differs from Process %d", opts.PID, opts.Process.PID)
		}
		return opts.Process, opts.Process.Check()
	case opts.PID < 0:
		return nil, fmt.Errorf("usdt: invalid PID %d (0 means every process)", opts.PID)
	case opts.PID > 0:
		return procmaps.Open(opts.PID)
	}
	return nil, nil
}

// Find checks what Attach without a process checks of target before it
// attaches: the file resolves, opens, is of this machine and has a probe
// matching provider:name (globs allowed). It returns Attach's error, or
// nil; nothing is attached.
func (a *Attacher) Find(target, provider, name string) error {
	objs, err := a.objects(nil, target, provider, name)
	if err != nil {
		return err
	}
	closeObjects(objs)
	return nil
}

// objects opens the files an attach covers and finds their probes. The
// caller closes the objects (closeObjects) once attached.
func (a *Attacher) objects(proc *procmaps.Process, target, provider, name string) ([]object, error) {
	if proc != nil && target == "" {
		return a.mappedObjects(proc, provider+":"+name)
	}
	var t *procmaps.Target
	var err error
	switch {
	case target == SelfExe:
		t, err = openExecutable(proc)
	case proc == nil:
		t, err = procmaps.OpenTarget(target)
	default:
		t, err = proc.OpenTarget(target)
	}
	if err != nil {
		return nil, fmt.Errorf("usdt: %w", err)
	}
	f, err := a.cache.OpenFile(t.File, target)
	if err != nil {
		t.Close()
		return nil, err
	}
	if err := attach.CheckMachine(target, f.Machine, f.ByteOrder); err != nil {
		t.Close()
		return nil, fmt.Errorf("usdt: %w", err)
	}
	probes, err := match(f, provider, name)
	if err != nil {
		t.Close()
		return nil, err
	}
	o := object{file: f, name: target, fd: t.File, probes: probes}
	if proc != nil {
		// A process that has not mapped the file (yet) still gets an
		// attach filtered to it; a mapping is needed only for user-space
		// semaphores and the IP map.
		if objs, err := proc.Objects(); err == nil {
			for i := range objs {
				if objs[i].ID() == t.ID {
					o.mapped = &objs[i]
					break
				}
			}
		}
	}
	return []object{o}, nil
}

// SelfExe, as a target ("/proc/self/exe", as libbpf's selftests write
// SEC("usdt//proc/self/exe:PROVIDER:NAME")), is the executable of the
// process attached to (Options.PID or Options.Process: /proc/PID/exe),
// or without one the calling program's own executable, as libbpf reads
// it (libbpf opens the path in the tracer). It is never resolved inside
// the process's root, where /proc/self is another process's, or none.
const SelfExe = "/proc/self/exe"

// openExecutable opens the executable of proc, or of the calling
// process when proc is nil: the object proc maps whose identity is that
// of /proc/PID/exe, opened as OpenObject opens it.
func openExecutable(proc *procmaps.Process) (*procmaps.Target, error) {
	if proc == nil {
		self, err := procmaps.Open(os.Getpid())
		if err != nil {
			return nil, fmt.Errorf("usdt: %s: %w", SelfExe, err)
		}
		t, err := openExecutable(self)
		if t != nil {
			t.Process = nil // a path-wide target
		}
		return t, err
	}
	exe := fmt.Sprintf("/proc/%d/exe", proc.PID)
	id, err := procmaps.IDOf(exe)
	if err != nil {
		return nil, fmt.Errorf("usdt: %s of pid %d: %w", SelfExe, proc.PID, err)
	}
	objs, err := proc.Objects()
	if err != nil {
		return nil, fmt.Errorf("usdt: %s of pid %d: %w", SelfExe, proc.PID, err)
	}
	for i := range objs {
		if objs[i].ID() == id {
			// OpenTarget of the mapped path opens it as OpenObject
			// does, with its identity checked.
			return proc.OpenTarget(objs[i].Path)
		}
	}
	return nil, fmt.Errorf("usdt: %s of pid %d (%s): %w: the process maps no file of that identity", SelfExe, proc.PID, id, os.ErrNotExist)
}

// mappedObjects opens every object proc has mapped with a probe matching
// glob.
func (a *Attacher) mappedObjects(proc *procmaps.Process, glob string) ([]object, error) {
	objs, err := proc.Objects()
	if err != nil {
		return nil, err
	}
	var out []object
	for i := range objs {
		fd, err := proc.OpenObject(&objs[i])
		if err != nil {
			if errors.Is(err, procmaps.ErrProcessGone) || errors.Is(err, procmaps.ErrProcessChanged) {
				closeObjects(out)
				return nil, err
			}
			continue // deleted without map_files rights, or not a regular file
		}
		f, err := a.cache.OpenFile(fd, objs[i].Path)
		if err != nil {
			fd.Close()
			continue // not ELF, no notes: not a candidate
		}
		probes := f.Match(glob)
		if len(probes) == 0 {
			fd.Close()
			continue
		}
		out = append(out, object{file: f, name: objs[i].Path, fd: fd, mapped: &objs[i], probes: probes})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no object mapped by pid %d has USDT %s: %w", proc.PID, glob, ErrNotFound)
	}
	return out, nil
}

// match finds the probes of f named by provider and name (globs allowed).
func match(f *File, provider, name string) ([]*Probe, error) {
	if !hasMeta(provider) && !hasMeta(name) {
		p, err := f.Find(provider, name)
		if err != nil {
			return nil, err
		}
		return []*Probe{p}, nil
	}
	probes := f.Match(provider + ":" + name)
	if len(probes) == 0 {
		return nil, fmt.Errorf("%s: no USDT matches %s:%s: %w", f.Path, provider, name, ErrNotFound)
	}
	return probes, nil
}

// hasMeta reports the glob characters File.Match knows: * and ?.
func hasMeta(s string) bool { return strings.ContainsAny(s, "*?") }
