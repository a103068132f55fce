package main

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/probekit/probekit/procmaps"
	"github.com/probekit/probekit/usdt"
)

// hostObject is a file with probes mapped by processes of the host, once
// per device and inode.
type hostObject struct {
	processObject
	pids []int
}

// listAll lists the probes of every object mapped by any process on the
// host (probekit list '*' [GLOB]), once per file, with the PIDs mapping it.
func listAll(out io.Writer, glob string, asJSON bool) error {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return err
	}
	files := map[procmaps.FileID]*hostObject{} // nil: no probes
	var scan hostScan
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		proc, objs, err := procmaps.Objects(pid)
		if err != nil {
			scan.failed(pid, err)
			continue
		}
		scan.read++
		for _, o := range objs {
			id := o.ID()
			if ho, seen := files[id]; seen {
				if ho != nil {
					ho.pids = append(ho.pids, pid)
				}
				continue
			}
			files[id] = nil
			f, err := proc.OpenObject(&o)
			if err != nil {
				continue
			}
			uf, err := usdt.Parse(f)
			f.Close()
			if err != nil {
				continue // no notes, or not ELF
			}
			uf.Path = o.Path
			var probes []*usdt.Probe
			if glob != "" {
				probes = uf.Match(glob)
			} else {
				for i := range uf.Probes {
					probes = append(probes, &uf.Probes[i])
				}
			}
			if len(probes) > 0 {
				files[id] = &hostObject{processObject{obj: o, file: uf, probes: probes}, []int{pid}}
			}
		}
	}
	var found []*hostObject
	for _, ho := range files {
		if ho != nil {
			found = append(found, ho)
		}
	}
	if len(found) == 0 {
		what, sentinel := "USDT probes", usdt.ErrNoProbes
		if glob != "" {
			what, sentinel = fmt.Sprintf("a probe matching %q", glob), usdt.ErrNotFound
		}
		if scan.unreadable() > 0 {
			return fmt.Errorf("no object mapped by the %d processes read has %s, and %s: %w", scan.read, what, &scan, sentinel)
		}
		return fmt.Errorf("no object mapped on this host has %s: %w", what, sentinel)
	}
	if scan.unreadable() > 0 {
		fmt.Fprintf(os.Stderr, "probekit list: warning: %s; the objects only they map are not listed\n", &scan)
	}
	slices.SortFunc(found, func(a, b *hostObject) int {
		return cmp.Or(cmp.Compare(a.obj.Path, b.obj.Path), cmp.Compare(a.obj.Inode, b.obj.Inode))
	})
	if asJSON {
		return writeHostJSON(out, found, &scan)
	}
	for i, ho := range found {
		if i > 0 {
			fmt.Fprintln(out)
		}
		pids := make([]string, len(ho.pids))
		for j, p := range ho.pids {
			pids[j] = strconv.Itoa(p)
		}
		fmt.Fprintf(out, "# %s (%s) mapped by pid %s\n", ho.obj.Path, ho.obj.ID(), strings.Join(pids, " "))
		if err := writeText(out, ho.file, ho.probes); err != nil {
			return err
		}
	}
	return nil
}

// writeHostJSON writes {"unreadable_processes": N, "objects": [{"path",
// "host_path", "dev", "inode", "pids", "machine", "probes": [...]}]}.
func writeHostJSON(out io.Writer, found []*hostObject, scan *hostScan) error {
	w := &jsonWriter{buf: make([]byte, 0, 64<<10)}
	w.open('{')
	w.int("unreadable_processes", int64(scan.unreadable()))
	w.key("objects")
	w.open('[')
	for _, ho := range found {
		err := writeObjectJSON(out, w, &ho.processObject, func() {
			w.uint("dev", ho.obj.Dev)
			w.uint("inode", ho.obj.Inode)
			w.key("pids")
			w.open('[')
			for _, p := range ho.pids {
				w.elem()
				w.buf = strconv.AppendInt(w.buf, int64(p), 10)
			}
			w.close(']')
		})
		if err != nil {
			return err
		}
	}
	w.close(']')
	w.close('}')
	return w.writeTo(out)
}

// hostScan counts the processes list '*' read and those it could not.
type hostScan struct {
	read int
	// denied counts processes whose root or maps the kernel refused
	// (EACCES: /proc/PID/root and /proc/PID/maps need ptrace read access,
	// which another user's process, or a set-user-ID one, does not give
	// without root or CAP_SYS_PTRACE).
	denied int
	// other counts the other failures; firstOther is the first.
	other      int
	firstOther error
}

// failed records why process pid could not be read. A process that
// exited meanwhile, and a kernel thread (no user space), are not
// failures.
func (s *hostScan) failed(pid int, err error) {
	switch {
	case errors.Is(err, procmaps.ErrProcessGone), errors.Is(err, procmaps.ErrProcessChanged), errors.Is(err, os.ErrNotExist):
	case isKernelThread(pid):
	case errors.Is(err, os.ErrPermission):
		s.denied++
	default:
		s.other++
		if s.firstOther == nil {
			s.firstOther = err
		}
	}
}

func (s *hostScan) unreadable() int { return s.denied + s.other }

// String says how many processes were unreadable and why.
func (s *hostScan) String() string {
	var parts []string
	if s.denied > 0 {
		parts = append(parts, fmt.Sprintf("%d processes could not be read: permission denied (another user's process needs root or CAP_SYS_PTRACE)", s.denied))
	}
	if s.other > 0 {
		parts = append(parts, fmt.Sprintf("%d processes could not be read (the first: %v)", s.other, s.firstOther))
	}
	return strings.Join(parts, "; ")
}

// isKernelThread reports whether pid is a kernel thread (PF_KTHREAD in
// /proc/PID/stat); false when that cannot be read.
func isKernelThread(pid int) bool {
	p, err := procmaps.Open(pid)
	if err != nil {
		return false
	}
	kthread, err := p.KernelThread()
	return err == nil && kthread
}
