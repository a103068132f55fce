package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/probekit/probekit/procmaps"
	"github.com/probekit/probekit/usdt"
)

// processObject is one mapped object of a process that has probes.
type processObject struct {
	obj    procmaps.Object
	file   *usdt.File
	probes []*usdt.Probe
}

// listProcess lists the probes of every object pid has mapped: its
// executable and shared libraries, opened through the process's root (a
// container's files as the container sees them).
func listProcess(out io.Writer, pid int, glob string, asJSON bool) error {
	proc, objs, err := procmaps.Objects(pid)
	if err != nil {
		return err
	}
	var found []processObject
	for _, o := range objs {
		if o.HostPath == "" {
			// Deleted or unreachable without map_files rights: say so
			// rather than skip it silently.
			if _, err := proc.OpenObject(&o); err != nil {
				fmt.Fprintf(os.Stderr, "probekit list: skipping %s: %v\n", o.Path, err)
			}
			continue
		}
		f, err := usdt.Open(o.HostPath)
		if errors.Is(err, os.ErrPermission) {
			fmt.Fprintf(os.Stderr, "probekit list: skipping %s: %v\n", o.Path, err)
			continue
		}
		if err != nil {
			// No notes, or not ELF at all (locale archives, fonts,
			// caches are mapped too): nothing to list.
			continue
		}
		f.Path = o.Path
		var probes []*usdt.Probe
		if glob != "" {
			probes = f.Match(glob)
		} else {
			for i := range f.Probes {
				probes = append(probes, &f.Probes[i])
			}
		}
		if len(probes) > 0 {
			found = append(found, processObject{obj: o, file: f, probes: probes})
		}
	}
	// The process may have exited while its files were read.
	if err := proc.Check(); err != nil {
		return err
	}
	if len(found) == 0 {
		if glob != "" {
			return fmt.Errorf("pid %d: no probe matches %q: %w", pid, glob, usdt.ErrNotFound)
		}
		return fmt.Errorf("pid %d: no mapped object has USDT probes: %w", pid, usdt.ErrNoProbes)
	}
	if asJSON {
		return writeProcessJSON(out, pid, found)
	}
	for i, po := range found {
		if i > 0 {
			fmt.Fprintln(out)
		}
		if po.obj.HostPath != po.obj.Path {
			fmt.Fprintf(out, "# %s opened as %s\n", po.obj.Path, po.obj.HostPath)
		}
		if err := writeText(out, po.file, po.probes); err != nil {
			return err
		}
	}
	return nil
}

// writeProcessJSON writes {"pid", "objects": [{"path", "host_path",
// "machine", "probes": [...]}]}, each object's probes as probekit list
// --json writes them for one file.
func writeProcessJSON(out io.Writer, pid int, found []processObject) error {
	w := &jsonWriter{buf: make([]byte, 0, 64<<10)}
	w.open('{')
	w.int("pid", int64(pid))
	w.key("objects")
	w.open('[')
	for i := range found {
		if err := writeObjectJSON(out, w, &found[i], nil); err != nil {
			return err
		}
	}
	w.close(']')
	w.close('}')
	return w.writeTo(out)
}

// writeObjectJSON writes one object of list -p or list '*': its path,
// host_path, what extra adds, machine and probes.
func writeObjectJSON(out io.Writer, w *jsonWriter, po *processObject, extra func()) error {
	w.elem()
	w.open('{')
	w.str("path", po.obj.Path)
	w.str("host_path", po.obj.HostPath)
	if extra != nil {
		extra()
	}
	w.str("machine", machineName(po.file.Machine))
	if err := writeProbesJSON(out, w, po.probes); err != nil {
		return err
	}
	w.close('}')
	return nil
}
