package usdt

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/probekit/probekit/internal/features"
	"github.com/probekit/probekit/procmaps"
	"github.com/probekit/probekit/semaphore"
)

// Errors of the attach phase.
var (
	// ErrSpecsFull: the __bpf_usdt_specs map has no free slot for the
	// specs an attach needs.
	ErrSpecsFull = errors.New("USDT spec map is full")
	// ErrNoSpecsMap: the collection does not define __bpf_usdt_specs,
	// i.e. its BPF program does not include usdt.bpf.h.
	ErrNoSpecsMap = errors.New("no " + specsMapName + " map (does the BPF program include usdt.bpf.h?)")
	// ErrRefCtrConflict: the kernel refused a semaphore because another
	// uprobe on the same file offset uses a different ref_ctr_offset (its
	// "ref_ctr_offset mismatch"), e.g. another tracer attached without
	// the semaphore.
	ErrRefCtrConflict = errors.New("semaphore conflicts with another uprobe on this site (reference counter offset mismatch)")
	// ErrIPCollision: without BPF cookies two attachments map the same
	// runtime address to a spec.
	ErrIPCollision = errors.New("IP collision: this probe site is already attached by this collection with another spec (kernels without BPF cookies key specs by address)")
)

// Names shared with usdt.bpf.h.
const (
	specsMapName = "__bpf_usdt_specs"
	ipMapName    = "__bpf_usdt_ip_to_spec_id"
)

// isUSDTProgram reports programs in "usdt" sections, the ones Prepare and
// auto-attach handle (libbpf's SEC("usdt"), SEC("usdt/PATH:PROV:NAME"),
// SEC("usdt.s...")).
func isUSDTProgram(p *ebpf.ProgramSpec) bool {
	s := p.SectionName
	return s == "usdt" || strings.HasPrefix(s, "usdt/") || strings.HasPrefix(s, "usdt.s")
}

// Prepare readies spec for USDT attachment before it is loaded: it sets
// the cookie flag of usdt.bpf.h to what the kernel supports, and gives
// programs in "usdt" sections the uprobe_multi attach type when the
// kernel has uprobe_multi with its PID-filter fix (the attach type is
// fixed at load, so this choice cannot wait for Attach).
func Prepare(spec *ebpf.CollectionSpec) error {
	if _, ok := spec.Maps[specsMapName]; !ok {
		return ErrNoSpecsMap
	}
	cookie, err := features.Have(features.Cookie)
	if err != nil {
		return fmt.Errorf("probe BPF cookie support: %w", err)
	}
	multi, err := features.Have(features.UprobeMulti)
	if err != nil {
		return fmt.Errorf("probe uprobe_multi support: %w", err)
	}
	if v, ok := spec.Variables[cookieFlagName]; ok {
		if err := v.Set(cookie); err != nil {
			return fmt.Errorf("set %s: %w", cookieFlagName, err)
		}
	} else if !cookie {
		return fmt.Errorf("kernel lacks BPF cookies and the program has no %s flag: %w", cookieFlagName, ebpf.ErrNotSupported)
	}
	for _, p := range spec.Programs {
		if !isUSDTProgram(p) {
			continue
		}
		if multi {
			p.AttachType = ebpf.AttachTraceUprobeMulti
		} else {
			p.AttachType = ebpf.AttachNone
		}
	}
	return nil
}

// Attacher attaches programs of one loaded collection to USDT probes. It
// owns the collection's spec map slots; use one Attacher per collection.
// It is safe for concurrent use.
type Attacher struct {
	specs  *ebpf.Map
	ipMap  *ebpf.Map
	layout *specLayout
	multi  bool // programs were loaded for uprobe_multi
	cookie bool // the BPF side finds specs by cookie, not IP
	ids    *specIDs
	cache  *Cache

	mu sync.Mutex // guards ipRefs and the IP map
	// ipRefs counts the links sharing each IP map entry. Without cookies
	// the BPF side knows a spec only by the probe's address, so two
	// attachments of one site can coexist only with the same spec bytes
	// (libbpf refuses every second one: "IP collision detected").
	ipRefs map[uint64]*ipEntry
}

type ipEntry struct {
	specID uint32
	spec   []byte
	refs   int
	// owned is set when the link that allocated specID closed while
	// others still share the entry: the slot is then released with the
	// entry, not with that link.
	owned bool
}

// NewAttacher binds an Attacher to a collection loaded from spec (which
// Prepare readied). The spec gives the specs map's BTF (its layout) and
// the choices Prepare made.
func NewAttacher(spec *ebpf.CollectionSpec, coll *ebpf.Collection) (*Attacher, error) {
	return NewAttacherWithMaps(spec, coll.Maps[specsMapName], coll.Maps[ipMapName])
}

// NewAttacherWithMaps is NewAttacher for objects loaded another way
// (bpf2go's LoadAndAssign): specs is __bpf_usdt_specs and ipToSpecID
// __bpf_usdt_ip_to_spec_id.
func NewAttacherWithMaps(spec *ebpf.CollectionSpec, specs, ipToSpecID *ebpf.Map) (*Attacher, error) {
	ms, ok := spec.Maps[specsMapName]
	if !ok || specs == nil {
		return nil, ErrNoSpecsMap
	}
	layout, err := newSpecLayout(ms.Value)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", specsMapName, err)
	}
	if int(specs.ValueSize()) != layout.size() {
		return nil, fmt.Errorf("%s: value size %d, BTF says %d", specsMapName, specs.ValueSize(), layout.size())
	}
	a := &Attacher{
		specs:  specs,
		ipMap:  ipToSpecID,
		layout: layout,
		cookie: true,
		ids:    newSpecIDs(specs.MaxEntries()),
		cache:  NewCache(),
		ipRefs: map[uint64]*ipEntry{},
	}
	if v, ok := spec.Variables[cookieFlagName]; ok {
		var flag bool
		if err := v.Get(&flag); err != nil {
			return nil, fmt.Errorf("read %s: %w", cookieFlagName, err)
		}
		a.cookie = flag
	}
	if !a.cookie && ipToSpecID == nil {
		return nil, fmt.Errorf("%s flag is off but there is no %s map", cookieFlagName, ipMapName)
	}
	for _, p := range spec.Programs {
		if isUSDTProgram(p) && p.AttachType == ebpf.AttachTraceUprobeMulti {
			a.multi = true
		}
	}
	return a, nil
}

// SpecsInUse is the number of spec map slots held by live links.
func (a *Attacher) SpecsInUse() int { return a.ids.inUse() }

// AttachOptions tunes Attach. The zero value (or nil) attaches to every
// process that runs the file, with cookie 0.
type AttachOptions struct {
	// PID restricts the probe to one process (0: every process that maps
	// the file, now and later). With a PID, the path is resolved as that
	// process sees it (inside its container), and an empty path means
	// every object the process has mapped: its executable and shared
	// libraries. libbpf's pid -1 is 0 here; there is no "self" shortcut
	// (pass os.Getpid()).
	PID int
	// Process pins the PID to a process identity (PID and start time), so
	// that a PID reused by another process is refused. Optional; when set,
	// PID may be 0.
	Process *procmaps.Process
	// Cookie is the value bpf_usdt_cookie() returns in the BPF program.
	Cookie uint64
	// LocationCookie, when set, gives each location its own cookie
	// (overriding Cookie): index is the location's index in probe.Locations.
	LocationCookie func(probe *Probe, index int) uint64
	// UserSemaphores raises semaphores through /proc/PID/mem even when
	// the kernel could manage them (needs a PID). Without it, the
	// user-space counter is only used on kernels without ref_ctr_offset
	// (before 4.20).
	UserSemaphores bool
}

// Attach attaches prog to the USDT probe provider:name of the file at
// path. provider and name may be globs ("function__*"); a probe with
// several locations is attached at each. On error nothing stays attached.
func (a *Attacher) Attach(prog *ebpf.Program, path, provider, name string, opts *AttachOptions) (*Link, error) {
	if prog == nil {
		return nil, errors.New("usdt: nil program")
	}
	if opts == nil {
		opts = &AttachOptions{}
	}
	if path == "" && opts.PID == 0 && opts.Process == nil {
		return nil, errors.New("usdt: attach needs a path, a PID or both")
	}
	proc, err := openProcess(opts)
	if err != nil {
		return nil, err
	}
	targets, err := a.resolve(proc, path, provider, name)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, t := range targets {
			if t.fd != nil {
				t.fd.Close()
			}
		}
	}()
	l := &Link{attacher: a}
	if err := a.attach(l, prog, proc, targets, opts); err != nil {
		return nil, errors.Join(err, l.Close())
	}
	return l, nil
}

func openProcess(opts *AttachOptions) (*procmaps.Process, error) {
	switch {
	case opts.Process != nil:
		if opts.PID != 0 && opts.PID != opts.Process.PID {
			return nil, fmt.Errorf("usdt: AttachOptions.PID %d differs from Process %d", opts.PID, opts.Process.PID)
		}
		return opts.Process, opts.Process.Check()
	case opts.PID < 0:
		return nil, fmt.Errorf("usdt: invalid PID %d (0 means every process)", opts.PID)
	case opts.PID > 0:
		return procmaps.Open(opts.PID)
	}
	return nil, nil
}

// object is one file to attach in, with the probes matched in it.
type object struct {
	file *File
	// name is the file as errors and Sites show it: the path given, or as
	// the process maps it.
	name string
	// hostPath opens the file from the tracer's mount namespace.
	hostPath string
	// mapped is the process's mapping of the file, nil for a path-wide
	// attach or a file the process has not mapped (yet).
	mapped *procmaps.Object
	probes []*Probe
	// fd keeps hostPath valid when it is a /proc/self/fd name.
	fd *os.File
}

// resolve finds the files and probes an attach covers.
func (a *Attacher) resolve(proc *procmaps.Process, target, provider, name string) ([]object, error) {
	glob := provider + ":" + name
	if proc == nil {
		f, err := a.cache.Open(target)
		if err != nil {
			return nil, err
		}
		probes, err := match(f, provider, name)
		if err != nil {
			return nil, err
		}
		return []object{{file: f, name: target, hostPath: target, probes: probes}}, nil
	}

	objs, err := proc.Objects()
	if err != nil {
		return nil, err
	}
	var out []object
	if target == "" {
		// Every mapped object with a matching probe.
		for i := range objs {
			if objs[i].HostPath == "" {
				continue // unreachable (deleted, and no map_files rights)
			}
			f, err := a.cache.Open(objs[i].HostPath)
			if err != nil {
				continue // not ELF, no notes, unreadable: not a candidate
			}
			if probes := f.Match(glob); len(probes) > 0 {
				out = append(out, object{file: f, name: objs[i].Path, hostPath: objs[i].HostPath, mapped: &objs[i], probes: probes})
			}
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("no object mapped by pid %d has USDT %s: %w", proc.PID, glob, ErrNotFound)
		}
		return out, nil
	}

	// The path as the process sees it, opened inside its root (a
	// container's symlinks stay in the container). The kernel is given the
	// open descriptor's /proc/self/fd name: re-resolving the path from our
	// root could reach another file. A process that has not mapped the
	// file (yet) still gets a path-wide attach filtered to it.
	if !filepath.IsAbs(target) {
		// Relative to the tracer's directory, like a path-wide attach.
		if target, err = filepath.Abs(target); err != nil {
			return nil, err
		}
	}
	fh, err := proc.OpenInRoot(target)
	if err != nil {
		return nil, err
	}
	hostPath := fmt.Sprintf("/proc/self/fd/%d", fh.Fd())
	f, err := a.cache.Open(hostPath)
	if err != nil {
		fh.Close()
		return nil, err
	}
	probes, err := match(f, provider, name)
	if err != nil {
		fh.Close()
		return nil, err
	}
	o := object{file: f, name: target, hostPath: hostPath, probes: probes, fd: fh}
	if id, err := procmaps.IDOf(hostPath); err == nil {
		for i := range objs {
			if objs[i].ID() == id {
				o.mapped = &objs[i]
				break
			}
		}
	}
	return []object{o}, nil
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

// site is one location to attach, as planned.
type site struct {
	obj    *object
	probe  *Probe
	loc    *Location
	specID uint32
	spec   []byte // the encoded spec
	// refCtr is the semaphore's file offset for the kernel, 0 for none.
	refCtr uint64
	// ip is the location's runtime address (IP-map path only).
	ip uint64
}

func (a *Attacher) attach(l *Link, prog *ebpf.Program, proc *procmaps.Process, objs []object, opts *AttachOptions) error {
	refCtrOK, err := features.Have(features.RefCtr)
	if err != nil {
		return fmt.Errorf("probe ref_ctr_offset support: %w", err)
	}
	userSema := opts.UserSemaphores || !refCtrOK
	if userSema && proc == nil {
		// Checked before anything is attached; a probe without a
		// semaphore still attaches path-wide below.
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
	}

	// Plan: a spec per location, deduplicated within this attach.
	var sites []site
	var encoded [][]byte
	index := map[string]int{}
	for oi := range objs {
		o := &objs[oi]
		sym := symbolsFor(o)
		for _, p := range o.probes {
			for li := range p.Locations {
				loc := &p.Locations[li]
				if loc.SiteErr != nil {
					return loc.SiteErr
				}
				cookie := opts.Cookie
				if opts.LocationCookie != nil {
					cookie = opts.LocationCookie(p, li)
				}
				spec, argErrs := buildSpec(o.file.Machine, loc.Address, loc.Args, sym, cookie)
				argErrs = append(argErrs, a.layout.fit(&spec)...)
				for _, e := range argErrs {
					l.warnings = append(l.warnings, fmt.Errorf("USDT %s:%s at %#x in %s: %w", p.Provider, p.Name, loc.Address, o.name, e))
				}
				if loc.ArgsErr != nil {
					l.warnings = append(l.warnings, fmt.Errorf("USDT %s:%s at %#x in %s: arguments unreadable: %w", p.Provider, p.Name, loc.Address, o.name, loc.ArgsErr))
				}
				b, err := a.layout.encode(&spec)
				if err != nil {
					return fmt.Errorf("USDT %s:%s at %#x in %s: %w", p.Provider, p.Name, loc.Address, o.name, err)
				}
				k, ok := index[string(b)]
				if !ok {
					k = len(encoded)
					index[string(b)] = k
					encoded = append(encoded, b)
				}
				s := site{obj: o, probe: p, loc: loc, specID: uint32(k), spec: encoded[k]}
				if loc.Semaphore != 0 && !userSema {
					s.refCtr = loc.SemaphoreOffset
				}
				sites = append(sites, s)
			}
		}
	}

	ids, err := a.ids.alloc(len(encoded))
	if err != nil {
		return err
	}
	l.specIDs = ids
	for k, b := range encoded {
		if err := a.specs.Update(ids[k], b, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("write spec %d to %s: %w", ids[k], specsMapName, err)
		}
	}
	for i := range sites {
		sites[i].specID = ids[sites[i].specID]
	}

	if userSema {
		if err := l.raiseSemaphores(proc, sites); err != nil {
			return err
		}
	}
	if !a.cookie {
		if err := a.mapIPs(l, proc, sites); err != nil {
			return err
		}
	}
	pid := 0
	if proc != nil {
		pid = proc.PID
	}
	// One link per object: uprobe_multi carries every location of the
	// file, or one perf-event uprobe per location.
	for start := 0; start < len(sites); {
		end := start + 1
		for end < len(sites) && sites[end].obj == sites[start].obj {
			end++
		}
		if err := a.link(l, prog, sites[start:end], pid); err != nil {
			return err
		}
		start = end
	}
	l.sites = make([]Site, len(sites))
	for i, s := range sites {
		l.sites[i] = Site{Path: s.obj.name, Probe: s.probe, Location: s.loc, SpecID: s.specID}
	}
	return nil
}

// raiseSemaphores increments each distinct semaphore once in proc.
func (l *Link) raiseSemaphores(proc *procmaps.Process, sites []site) error {
	seen := map[*Location]bool{}
	for _, s := range sites {
		if s.loc.Semaphore == 0 || seen[s.loc] {
			continue
		}
		seen[s.loc] = true
		if s.obj.mapped == nil {
			return fmt.Errorf("USDT %s:%s: pid %d has not mapped %s, so its semaphore cannot be raised from user space",
				s.probe.Provider, s.probe.Name, proc.PID, s.obj.name)
		}
		// The counter's runtime address: the mapping of the file that holds
		// its file offset (usdt-facts §1.3, "Runtime address").
		addr, err := s.obj.mapped.Address(s.loc.SemaphoreOffset, procmaps.Write)
		if err != nil {
			return fmt.Errorf("USDT %s:%s semaphore at file offset %#x: %w", s.probe.Provider, s.probe.Name, s.loc.SemaphoreOffset, err)
		}
		act, err := semaphore.Activate(proc, addr)
		if err != nil {
			return fmt.Errorf("USDT %s:%s: %w", s.probe.Provider, s.probe.Name, err)
		}
		l.semaphores = append(l.semaphores, act)
	}
	return nil
}

// mapIPs fills the IP map for kernels without BPF cookies: the BPF side
// looks the spec up by the probe's runtime address.
func (a *Attacher) mapIPs(l *Link, proc *procmaps.Process, sites []site) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := range sites {
		s := &sites[i]
		switch {
		case s.obj.mapped != nil:
			addr, err := s.obj.mapped.Address(s.loc.FileOffset, procmaps.Exec)
			if err != nil {
				return fmt.Errorf("USDT %s:%s at file offset %#x: %w", s.probe.Provider, s.probe.Name, s.loc.FileOffset, err)
			}
			s.ip = addr
		case s.obj.file.Type == elf.ET_EXEC:
			// A non-PIE executable runs at its link-time addresses.
			s.ip = s.loc.Address
		default:
			return fmt.Errorf("USDT %s:%s in %s: without BPF cookies (Linux 5.15) a position-independent file needs a PID whose mapping gives the runtime address: %w",
				s.probe.Provider, s.probe.Name, s.obj.name, ebpf.ErrNotSupported)
		}
		if e, ok := a.ipRefs[s.ip]; ok {
			if !bytes.Equal(e.spec, s.spec) {
				return fmt.Errorf("USDT %s:%s at %#x with another cookie or spec: %w", s.probe.Provider, s.probe.Name, s.ip, ErrIPCollision)
			}
			e.refs++
		} else {
			if err := a.ipMap.Update(s.ip, s.specID, ebpf.UpdateNoExist); err != nil {
				if errors.Is(err, ebpf.ErrKeyExist) {
					return fmt.Errorf("USDT %s:%s at %#x: %w", s.probe.Provider, s.probe.Name, s.ip, ErrIPCollision)
				}
				return fmt.Errorf("write %s: %w", ipMapName, err)
			}
			a.ipRefs[s.ip] = &ipEntry{specID: s.specID, spec: s.spec, refs: 1}
		}
		l.ips = append(l.ips, s.ip)
	}
	return nil
}

// link attaches prog at sites, all in one file.
func (a *Attacher) link(l *Link, prog *ebpf.Program, sites []site, pid int) error {
	o := sites[0].obj
	ex, err := link.OpenExecutable(o.hostPath)
	if err != nil {
		return fmt.Errorf("open %s: %w", o.hostPath, err)
	}
	cookie := func(s site) uint64 {
		if a.cookie {
			return uint64(s.specID)
		}
		return 0
	}
	explain := func(err error, s site) error {
		// cilium/ebpf formats the perf link's errno without wrapping it.
		if errors.Is(err, syscall.EMFILE) || strings.Contains(err.Error(), syscall.EMFILE.Error()) {
			return fmt.Errorf("USDT %s:%s at %s+%#x: %w (without uprobe_multi each site holds a file descriptor: raise RLIMIT_NOFILE)",
				s.probe.Provider, s.probe.Name, o.name, s.loc.FileOffset, err)
		}
		if s.refCtr != 0 && errors.Is(err, syscall.EINVAL) {
			return fmt.Errorf("USDT %s:%s at %s+%#x: %w (%w)", s.probe.Provider, s.probe.Name, o.name, s.loc.FileOffset, ErrRefCtrConflict, err)
		}
		return fmt.Errorf("USDT %s:%s at %s+%#x: %w", s.probe.Provider, s.probe.Name, o.name, s.loc.FileOffset, err)
	}

	if a.multi {
		opts := &link.UprobeMultiOptions{PID: uint32(pid)}
		anyRef := false
		for _, s := range sites {
			opts.Addresses = append(opts.Addresses, s.loc.FileOffset)
			opts.RefCtrOffsets = append(opts.RefCtrOffsets, s.refCtr)
			opts.Cookies = append(opts.Cookies, cookie(s))
			anyRef = anyRef || s.refCtr != 0
		}
		if !anyRef {
			opts.RefCtrOffsets = nil
		}
		lk, err := ex.UprobeMulti(nil, prog, opts)
		if err != nil {
			// One link for every site: blame a site with a semaphore when
			// the kernel says EINVAL, the answer to a ref_ctr conflict.
			blame := sites[0]
			for _, s := range sites {
				if s.refCtr != 0 {
					blame = s
					break
				}
			}
			return explain(err, blame)
		}
		l.links = append(l.links, lk)
		return nil
	}
	for _, s := range sites {
		lk, err := ex.Uprobe("", prog, &link.UprobeOptions{
			Address:      s.loc.FileOffset,
			RefCtrOffset: s.refCtr,
			Cookie:       cookie(s),
			PID:          pid,
		})
		if err != nil {
			return explain(err, s)
		}
		l.links = append(l.links, lk)
	}
	return nil
}

// AutoAttach attaches every program of coll whose section names its probe,
// SEC("usdt/PATH:PROVIDER:NAME") as libbpf writes it, to every process
// (or opts.PID). It returns the links in program-name order of spec; on
// error nothing stays attached.
func (a *Attacher) AutoAttach(spec *ebpf.CollectionSpec, coll *ebpf.Collection, opts *AttachOptions) ([]*Link, error) {
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

// ParseSection splits "PATH:PROVIDER:NAME" (the part of a SEC("usdt/...")
// name after the slash, or a probekit trace PROBE). The path may contain
// colons; the last two fields are the provider and the name.
func ParseSection(s string) (file, provider, name string, err error) {
	i := strings.LastIndexByte(s, ':')
	if i <= 0 {
		return "", "", "", fmt.Errorf("%q: want PATH:PROVIDER:NAME", s)
	}
	j := strings.LastIndexByte(s[:i], ':')
	if j <= 0 || j == i-1 || i == len(s)-1 {
		return "", "", "", fmt.Errorf("%q: want PATH:PROVIDER:NAME", s)
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

// symbolsFor returns a symbol resolver for PC-relative arguments of
// o's probes, reading the symbol tables only when an argument needs them.
func symbolsFor(o *object) func(string) (uint64, bool) {
	var (
		once    sync.Once
		resolve func(string) (uint64, bool)
	)
	return func(name string) (uint64, bool) {
		once.Do(func() {
			f, err := elf.Open(o.hostPath)
			if err != nil {
				resolve = func(string) (uint64, bool) { return 0, false }
				return
			}
			defer f.Close()
			resolve = symbolResolver(f)
		})
		return resolve(name)
	}
}
