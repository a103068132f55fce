package uprobe

// Probes found by address: on a kernel without BPF cookies (before Linux
// 5.15) a program cannot read a per-site value from the attachment, so
// the site's cookie goes in a BPF hash map keyed by where the probe hits
// (Options.AddressTable).

import (
	"debug/elf"
	"errors"
	"fmt"
	"sync"

	"github.com/cilium/ebpf"

	"github.com/probekit/probekit/internal/features"
	"github.com/probekit/probekit/procmaps"
)

// AddressKey is the key of an Options.AddressTable: the process (its
// thread group id as bpf_get_current_pid_tgid reports it, in the initial
// PID namespace) and the runtime address of the probed instruction, which
// is the instruction pointer a uprobe's program sees (the kernel sets it
// back to the breakpoint's address before the handlers run). PID 0 is
// every process: the key of a file that runs at its link-time addresses
// (a non-PIE executable). The value is the site's cookie, a uint64. The
// BPF side looks up its own process first, then PID 0. record/trace.c's
// struct func_ip_key has this layout.
type AddressKey struct {
	PID uint32
	_   uint32
	IP  uint64
}

// ErrAddressCollision indicates that an address table already maps a
// site's address in that process to another cookie: without BPF cookies
// one site can carry one description per table.
var ErrAddressCollision = errors.New("uprobe: the address table already holds this site with another cookie (kernels without BPF cookies key probes by address)")

// tables counts, per address table, the links sharing each entry: two
// attachments of one site in one process (a function named by two
// probes with the same cookie, a process attached again before its old
// link is closed) share it, and the last one out deletes it.
var tables = struct {
	sync.Mutex
	refs map[*ebpf.Map]map[AddressKey]*tableEntry
}{refs: map[*ebpf.Map]map[AddressKey]*tableEntry{}}

type tableEntry struct {
	cookie uint64
	refs   int
}

// useTable reports whether sites are found through o.AddressTable: a
// table is given and the kernel has no BPF cookies.
func useTable(o Options) (bool, error) {
	if o.AddressTable == nil {
		return false, nil
	}
	cookie, err := features.Have(features.Cookie)
	if err != nil {
		return false, fmt.Errorf("uprobe: probe BPF cookie support: %w", err)
	}
	return !cookie, nil
}

// tableKeys returns the key of each file offset of ps (all of them, in
// order) in process pid (0: every process).
func (b *Binary) tableKeys(ps []probe, pid int) ([]AddressKey, error) {
	var keys []AddressKey
	if b.file.Type == elf.ET_EXEC {
		// A non-PIE executable runs at its link-time addresses, in
		// every process.
		for _, p := range ps {
			for _, off := range p.offsets {
				addr, ok := b.segments.Address(off, true)
				if !ok {
					return nil, fmt.Errorf("uprobe: %s: %s: file offset %#x is in no executable segment", b.display, p.fn, off)
				}
				keys = append(keys, AddressKey{IP: addr})
			}
		}
		return keys, nil
	}
	if pid == 0 {
		return nil, fmt.Errorf("uprobe: %s is position-independent: without BPF cookies its probes are found by runtime address, which only a PID gives (%w)",
			b.display, features.Check(features.Cookie))
	}
	proc := b.proc
	if proc == nil || proc.PID != pid {
		var err error
		if proc, _, err = procmaps.Objects(pid); err != nil {
			return nil, fmt.Errorf("uprobe: %s: %w", b.display, err)
		}
	}
	obj, err := proc.Object(b.target.ID)
	if err != nil {
		return nil, fmt.Errorf("uprobe: %s is position-independent and not mapped by pid %d yet: without BPF cookies its probes are found by runtime address (%w): %w",
			b.display, pid, features.Check(features.Cookie), err)
	}
	for _, p := range ps {
		for _, off := range p.offsets {
			addr, err := obj.Address(off, procmaps.Exec)
			if err != nil {
				return nil, fmt.Errorf("uprobe: %s: %s in pid %d: %w", b.display, p.fn, pid, err)
			}
			keys = append(keys, AddressKey{PID: uint32(pid), IP: addr})
		}
	}
	return keys, nil
}

// addToTable writes each key's cookie into table; on error nothing it
// wrote stays. The returned function deletes them again.
func addToTable(table *ebpf.Map, keys []AddressKey, cookies []uint64) (release func() error, err error) {
	tables.Lock()
	defer tables.Unlock()
	refs := tables.refs[table]
	if refs == nil {
		refs = map[AddressKey]*tableEntry{}
		tables.refs[table] = refs
	}
	var held []AddressKey
	release = func() error {
		tables.Lock()
		defer tables.Unlock()
		return dropKeys(table, refs, held)
	}
	for i, k := range keys {
		if e, ok := refs[k]; ok {
			if e.cookie != cookies[i] {
				return nil, errors.Join(fmt.Errorf("pid %d address %#x: %w", k.PID, k.IP, ErrAddressCollision), dropKeys(table, refs, held))
			}
			e.refs++
		} else {
			if err := table.Update(k, cookies[i], ebpf.UpdateNoExist); err != nil {
				if errors.Is(err, ebpf.ErrKeyExist) {
					err = ErrAddressCollision
				}
				return nil, errors.Join(fmt.Errorf("pid %d address %#x: write the address table: %w", k.PID, k.IP, err), dropKeys(table, refs, held))
			}
			refs[k] = &tableEntry{cookie: cookies[i], refs: 1}
		}
		held = append(held, k)
	}
	return release, nil
}

// dropKeys releases one reference on each of keys; tables is locked.
func dropKeys(table *ebpf.Map, refs map[AddressKey]*tableEntry, keys []AddressKey) error {
	var errs []error
	for _, k := range keys {
		e := refs[k]
		if e == nil {
			continue
		}
		if e.refs--; e.refs > 0 {
			continue
		}
		delete(refs, k)
		if err := table.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, fmt.Errorf("pid %d address %#x: delete from the address table: %w", k.PID, k.IP, err))
		}
	}
	if len(refs) == 0 {
		delete(tables.refs, table)
	}
	return errors.Join(errs...)
}
