package main

import (
	"cmp"
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
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		proc, objs, err := procmaps.Objects(pid)
		if err != nil {
			continue // gone, or a kernel thread
		}
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
		if glob != "" {
			return fmt.Errorf("no object mapped on this host has a probe matching %q: %w", glob, usdt.ErrNotFound)
		}
		return fmt.Errorf("no object mapped on this host has USDT probes: %w", usdt.ErrNoProbes)
	}
	slices.SortFunc(found, func(a, b *hostObject) int {
		return cmp.Or(cmp.Compare(a.obj.Path, b.obj.Path), cmp.Compare(a.obj.Inode, b.obj.Inode))
	})
	if asJSON {
		return writeHostJSON(out, found)
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

// writeHostJSON writes {"objects": [{"path", "host_path", "dev", "inode",
// "pids", "machine", "probes": [...]}]}.
func writeHostJSON(out io.Writer, found []*hostObject) error {
	w := &jsonWriter{buf: make([]byte, 0, 64<<10)}
	w.open('{')
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
