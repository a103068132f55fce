package usdt

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
	"strings"

	"github.com/probekit/probekit/argspec"
	"github.com/probekit/probekit/internal/glob"
	"github.com/probekit/probekit/internal/safeelf"
	"github.com/probekit/probekit/procmaps"
)

// File is the USDT probes of one ELF file.
type File struct {
	// Path is the path the file was opened by; empty after Parse.
	Path      string
	Machine   elf.Machine
	Class     elf.Class
	ByteOrder binary.ByteOrder
	Type      elf.Type
	// Probes are in the order of their first note.
	Probes []Probe
}

// Open reads the USDT probes of the ELF file at path. It returns an error
// wrapping ErrNoProbes for a file without stapsdt notes, a *FormatError
// for a corrupt one. Only a regular file is opened, without blocking: a
// FIFO, socket, device or directory fails at once
// (procmaps.ErrNotRegular).
func Open(path string) (*File, error) {
	fd, err := procmaps.OpenFile(path)
	if err != nil {
		return nil, fmt.Errorf("usdt: %w", err)
	}
	defer fd.Close()
	f, err := parse(fd)
	if err != nil {
		return nil, fmt.Errorf("usdt: %s: %w", path, err)
	}
	f.Path = path
	return f, nil
}

// Parse reads the USDT probes of the ELF file r. Errors are as for Open.
func Parse(r io.ReaderAt) (*File, error) {
	f, err := parse(r)
	if err != nil {
		return nil, fmt.Errorf("usdt: %w", err)
	}
	return f, nil
}

func parse(r io.ReaderAt) (f *File, err error) {
	// The parser bounds-checks everything; the recover is a second line
	// of defence for a tracer running as root over others' files.
	defer safeelf.Recover(&err)
	ef, err := safeelf.NewFile(r)
	if err != nil {
		return nil, err
	}
	notes, err := readNotes(ef)
	if err != nil {
		return nil, err
	}
	if len(notes) == 0 {
		return nil, ErrNoProbes
	}
	f = &File{Machine: ef.Machine, Class: ef.Class, ByteOrder: ef.ByteOrder, Type: ef.Type}
	l := newAddressing(ef)

	// Group notes into probes, in order of first appearance, and give
	// every probe its exact share of one Location array.
	index := make(map[[2]string]int, len(notes))
	probeOf := make([]int, len(notes))
	var counts []int
	for i := range notes {
		key := [2]string{notes[i].provider, notes[i].name}
		pi, ok := index[key]
		if !ok {
			pi = len(f.Probes)
			index[key] = pi
			f.Probes = append(f.Probes, Probe{Provider: notes[i].provider, Name: notes[i].name})
			counts = append(counts, 0)
		}
		probeOf[i] = pi
		counts[pi]++
	}
	all := make([]Location, 0, len(notes))
	for pi := range f.Probes {
		start := len(all)
		all = all[:start+counts[pi]]
		// Full slice expression: an append to one probe's locations
		// cannot overwrite the next probe's.
		f.Probes[pi].Locations = all[start : start : start+counts[pi]]
	}

	argsCache := make(map[string]parsedArgs)
	for i := range notes {
		n := &notes[i]
		p := &f.Probes[probeOf[i]]
		delta := l.prelinkDelta(n.base)
		loc := Location{
			Address:  (n.location + delta) & l.addrMask,
			Base:     n.base,
			ArgsSpec: n.args,
		}
		if n.semaphore != 0 {
			loc.Semaphore = (n.semaphore + delta) & l.addrMask
		}
		pa, ok := argsCache[n.args]
		if !ok {
			pa = decodeArgs(ef.Machine, n.args)
			argsCache[n.args] = pa
		}
		loc.Args, loc.ArgsErr = pa.args, pa.err
		l.resolve(p, &loc)
		p.Locations = append(p.Locations, loc)
	}
	checkSites(ef, &l, f.Probes)
	return f, nil
}

type parsedArgs struct {
	args []argspec.Arg
	err  error
}

// decodeArgs decodes a note's argument string. An empty string, or one
// starting with ':', has no arguments, as libbpf's parse_usdt_note reads
// it.
func decodeArgs(m elf.Machine, s string) parsedArgs {
	if s == "" || strings.HasPrefix(s, ":") {
		return parsedArgs{}
	}
	args, err := argspec.Parse(m, s)
	return parsedArgs{args, err}
}

// Find returns the probe with the given provider and name. An empty
// provider matches any provider, provided only one has that name. The
// error wraps ErrNotFound.
func (f *File) Find(provider, name string) (*Probe, error) {
	var found *Probe
	for i := range f.Probes {
		p := &f.Probes[i]
		if p.Name != name || (provider != "" && p.Provider != provider) {
			continue
		}
		if found != nil {
			return nil, fmt.Errorf("usdt: probe name %q is in providers %q and %q: name the provider", name, found.Provider, p.Provider)
		}
		found = p
	}
	if found == nil {
		where := f.Path
		if where == "" {
			where = "file"
		}
		return nil, fmt.Errorf("usdt: %s:%s in %s: %w (probekit list shows the file's probes)", provider, name, where, ErrNotFound)
	}
	return found, nil
}

// Match returns the probes matching pattern, in file order. The pattern
// is "provider:name", each part a glob with '*' (any run of characters),
// '?' (one character) and '\' (escapes the next); a pattern without ':'
// matches the name in any provider. "python:function__*", "*:gc__*" and
// "gc__*" are globs.
func (f *File) Match(pattern string) []*Probe {
	pglob, nglob, ok := strings.Cut(pattern, ":")
	if !ok {
		pglob, nglob = "*", pattern
	}
	var out []*Probe
	for i := range f.Probes {
		p := &f.Probes[i]
		if glob.Match(pglob, p.Provider) && glob.Match(nglob, p.Name) {
			out = append(out, p)
		}
	}
	return out
}
