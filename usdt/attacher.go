package usdt

import (
	"errors"
	"fmt"
	"sync"
	"syscall"

	"github.com/cilium/ebpf"

	"github.com/probekit/probekit/attach"
	"github.com/probekit/probekit/internal/features"
	"github.com/probekit/probekit/procmaps"
)

// Errors of the attach phase.
var (
	// ErrSpecsFull indicates the __bpf_usdt_specs map has no free slot for the
	// specs an attach needs. errors.Is also matches it to syscall.E2BIG,
	// the errno libbpf's attach returns when it runs out of spec ids, so
	// that code ported from libbpf that checks the errno keeps working.
	ErrSpecsFull error = &errnoError{"USDT spec map is full", syscall.E2BIG}
	// ErrNoSpecsMap indicates the collection does not define __bpf_usdt_specs,
	// i.e. its BPF program does not include usdt.bpf.h.
	ErrNoSpecsMap = errors.New("no " + specsMapName + " map (does the BPF program include usdt.bpf.h?)")
	// ErrRefCtrConflict indicates the kernel refused a semaphore because another
	// uprobe on the same file offset was created with another reference
	// counter offset, or none: usually another tracer attached without
	// the semaphore. The message says how to find it.
	ErrRefCtrConflict = attach.ErrRefCtrConflict
	// ErrIPCollision indicates without BPF cookies two attachments map the same
	// runtime address to a spec.
	ErrIPCollision = errors.New("IP collision: this probe site is already attached by this collection with another spec (kernels without BPF cookies key specs by address)")
	// ErrNotPrepared indicates the program was loaded without Prepare.
	ErrNotPrepared = attach.ErrNotPrepared
)

// Names shared with usdt.bpf.h.
const (
	specsMapName   = "__bpf_usdt_specs"
	ipMapName      = "__bpf_usdt_ip_to_spec_id"
	cookieFlagName = attach.CookieFlag
)

// Prepare readies spec before it is loaded: it is attach.Prepare (the
// same call as uprobe.Prepare), after checking that the collection
// includes usdt.bpf.h. It gives the programs in "usdt", "uprobe" and
// "uretprobe" sections the attach type of the links this kernel gets
// (uprobe_multi where the kernel has it with its PID-filter fix) and sets
// usdt.bpf.h's cookie flag to what the kernel supports.
func Prepare(spec *ebpf.CollectionSpec) error {
	if spec == nil {
		return errors.New("usdt: prepare: nil collection spec")
	}
	if _, ok := spec.Maps[specsMapName]; !ok {
		return ErrNoSpecsMap
	}
	if _, ok := spec.Variables[cookieFlagName]; !ok {
		if err := features.Check(features.Cookie); err != nil {
			return fmt.Errorf("the program has no %s flag: %w", cookieFlagName, err)
		}
	}
	return attach.Prepare(spec)
}

// Attacher attaches programs of one loaded collection to USDT probes. It
// owns the collection's spec map slots; use one Attacher per collection.
// It is safe for concurrent use.
type Attacher struct {
	specs  *ebpf.Map
	ipMap  *ebpf.Map
	layout *specLayout
	cookie bool // the BPF side finds specs by cookie, not IP
	ids    *specIDs
	cache  *Cache

	mu sync.Mutex // guards ipRefs and the IP map
	// ipRefs counts the links sharing each IP map entry. Without cookies
	// the BPF side knows a spec only by the probe's address, so two
	// attachments of one site in one process can coexist only with the
	// same spec bytes (libbpf refuses every second one: "IP collision
	// detected").
	ipRefs map[ipKey]*ipEntry
	// ipByProcess: the IP map is keyed by process and address
	// (usdt.bpf.h's struct __probekit_usdt_ip_key), not by the address
	// alone (libbpf's layout).
	ipByProcess bool
	// same is the program's __probekit_usdt_same (SetSameArgs): sites
	// must agree with it.
	same sameArgs
}

// ipKey is an IP map entry: the runtime address of a site in process
// PID, or in every process (PID 0, and always in libbpf's layout).
type ipKey struct {
	PID uint32
	_   uint32
	IP  uint64
}

// ipKeySize is the size of struct __probekit_usdt_ip_key.
const ipKeySize = 16

// mapKey is k as the IP map holds it.
func (a *Attacher) mapKey(k ipKey) any {
	if a.ipByProcess {
		return k
	}
	return k.IP
}

type ipEntry struct {
	specID uint32
	spec   []byte
	refs   int
}

// NewAttacher binds an Attacher to a collection loaded from spec (which
// Prepare readied). The spec gives the specs map's BTF (its layout) and
// the cookie flag Prepare set.
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
		ipRefs: map[ipKey]*ipEntry{},
	}
	if v, ok := spec.Variables[cookieFlagName]; ok {
		var flag bool
		if err := v.Get(&flag); err != nil {
			return nil, fmt.Errorf("read %s: %w", cookieFlagName, err)
		}
		a.cookie = flag
	}
	if err := a.readSameArgs(spec); err != nil {
		return nil, err
	}
	if !a.cookie && ipToSpecID == nil {
		return nil, fmt.Errorf("%s flag is off but there is no %s map", cookieFlagName, ipMapName)
	}
	if ipToSpecID != nil {
		switch ipToSpecID.KeySize() {
		case ipKeySize:
			a.ipByProcess = true
		case 8:
		default:
			return nil, fmt.Errorf("%s: key of %d bytes, want 8 (an address) or %d (a process and an address)", ipMapName, ipToSpecID.KeySize(), ipKeySize)
		}
	}
	return a, nil
}

// SpecsInUse is the number of spec map slots held by live links: one per
// distinct spec, however many links share it.
func (a *Attacher) SpecsInUse() int { return a.ids.inUse() }

// Options tune Attach, named as uprobe.Options names the same things. The
// zero value (or nil) attaches to every process that runs the file, with
// cookie 0.
type Options struct {
	// PID restricts the probe to one process (0: every process that maps
	// the file, now and later). With a PID, the target is resolved as
	// that process sees it (inside its container: a path in its root, a
	// bare name among its mapped objects), and an empty target means
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

// errnoError is a sentinel that errors.Is also matches to errno: the
// errno libbpf returns for the same failure.
type errnoError struct {
	msg   string
	errno syscall.Errno
}

func (e *errnoError) Error() string { return e.msg }

func (e *errnoError) Is(target error) bool {
	errno, ok := target.(syscall.Errno)
	return ok && errno == e.errno
}
