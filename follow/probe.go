package follow

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/cilium/ebpf"

	"github.com/probekit/probekit/attach"
	"github.com/probekit/probekit/procmaps"
	"github.com/probekit/probekit/uprobe"
	"github.com/probekit/probekit/usdt"
)

// Probe is one wanted probe: a USDT probe (Provider and Name set) or a
// function probe (Function set).
type Probe struct {
	// Target is the file: a path, a program on PATH or a library name
	// (resolved once, as the caller sees it, by procmaps.Resolve), opened
	// in each process as that process sees it.
	Target string
	// Provider and Name of a USDT probe; globs allowed.
	Provider, Name string
	// Function names a function, or a glob of functions.
	Function string
	// Return attaches at the function's returns instead of its entry
	// (uprobe.Binary.Returns).
	Return bool
	// Program runs at each hit.
	Program *ebpf.Program
	// Cookie is the value the program reads (bpf_usdt_cookie or
	// bpf_get_attach_cookie).
	Cookie uint64
	// LocationCookie gives each USDT location its own cookie
	// (usdt.Options.LocationCookie).
	LocationCookie func(p *usdt.Probe, index int) uint64
	// FunctionCookie gives each function its own cookie
	// (uprobe.Options.FunctionCookie).
	FunctionCookie func(fn uprobe.Function) uint64
	// AddressTable is where Program finds a function site's cookie on a
	// kernel without BPF cookies (uprobe.Options.AddressTable): each
	// process's sites are keyed by its PID.
	AddressTable *ebpf.Map
	// Skip, when set, leaves out the functions of a glob that cannot take
	// the probe instead of failing the file (uprobe.Options.Skip).
	Skip func(fn uprobe.Function, err error)

	// file is the identity of a named Target attached as each process
	// maps it (kernels without BPF cookies), zero for a selector.
	file procmaps.FileID
}

// String is the probe as the command line writes it.
func (p *Probe) String() string {
	if p.Function != "" {
		kind := "uprobe"
		if p.Return {
			kind = "uretprobe"
		}
		return kind + ":" + p.Target + ":" + p.Function
	}
	return p.Target + ":" + p.Provider + ":" + p.Name
}

// check refuses a probe that names neither a USDT probe nor a function.
func (p *Probe) check(haveAttacher bool) error {
	switch {
	case p.Program == nil:
		return fmt.Errorf("probe %s: no program", p)
	case p.Target == "":
		return fmt.Errorf("probe %s: no target", p)
	case p.Function != "" && (p.Provider != "" || p.Name != ""):
		return fmt.Errorf("probe %s: a USDT probe or a function, not both", p)
	case p.Function == "" && p.Name == "":
		return fmt.Errorf("probe %s: want Provider and Name, or Function", p)
	case p.Function == "" && !haveAttacher:
		return fmt.Errorf("probe %s: USDT probes need Options.Attacher", p)
	}
	return nil
}

// resolve turns a bare program or library name into the path the caller
// sees, once: a process of the tree opens that path in its own root.
func (p Probe) resolve() (Probe, error) {
	if strings.ContainsRune(p.Target, '/') {
		return p, nil
	}
	path, err := procmaps.Resolve(p.Target)
	if err != nil {
		return p, fmt.Errorf("probe %s: %w", &p, err)
	}
	p.Target = path
	return p, nil
}

// realTarget is p's named target as processes map it: the file
// procmaps.Resolve finds for the caller, absolute, its symbolic links
// resolved (a host watch selects files by the paths in /proc/PID/maps).
// A target the caller cannot find stays as given: a bare name then
// selects files by their base name, a path by itself.
func (p Probe) realTarget() Probe {
	path, err := procmaps.Resolve(p.Target)
	if err == nil {
		path, err = filepath.Abs(path)
	}
	if err == nil {
		path, err = filepath.EvalSymlinks(path)
	}
	if err == nil {
		p.Target = path
	}
	return p
}

// attachTo attaches p in process proc only.
func (p *Probe) attachTo(att *usdt.Attacher, proc *procmaps.Process) (*attach.Link, error) {
	if p.Function == "" {
		return att.Attach(p.Program, p.Target, p.Provider, p.Name, &usdt.Options{
			Process: proc, Cookie: p.Cookie, LocationCookie: p.LocationCookie,
		})
	}
	b, err := uprobe.OpenProcess(proc, p.Target)
	if err != nil {
		return nil, err
	}
	defer b.Close()
	fns, err := b.Resolve(p.Function)
	if err != nil {
		return nil, err
	}
	opts := &uprobe.Options{Cookie: p.Cookie, FunctionCookie: p.FunctionCookie, Skip: p.Skip, AddressTable: p.AddressTable}
	if p.Return {
		return b.Returns(fns, p.Program, opts)
	}
	return b.Entries(fns, p.Program, opts)
}
