package usdt

import (
	"errors"
	"fmt"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/probekit/probekit/semaphore"
)

// Site is one location a Link attached to.
type Site struct {
	// Path is the file as it was parsed (a host path).
	Path     string
	Probe    *Probe
	Location *Location
	// SpecID is the slot of __bpf_usdt_specs holding the location's spec.
	SpecID uint32
}

// Link is an attached USDT probe: the uprobe links of its locations, the
// spec map slots, IP map entries and user-space semaphore counts they
// hold. Close releases all of them.
//
// Link satisfies cilium/ebpf's link.Link. That interface has an
// unexported method, so Link embeds a nil link.Link to carry it; every
// exported method is Link's own and the embedded value is never used.
type Link struct {
	link.Link

	attacher   *Attacher
	mu         sync.Mutex
	closed     bool
	links      []link.Link
	specIDs    []uint32
	ips        []uint64
	semaphores []*semaphore.Activation
	sites      []Site
	warnings   []error
}

// Sites lists the locations attached.
func (l *Link) Sites() []Site { return l.sites }

// Warnings lists the arguments that could not be expressed for the BPF
// side (an unsupported operand, a symbol not found): bpf_usdt_arg()
// returns -EINVAL for them while the other arguments read normally.
func (l *Link) Warnings() []error { return l.warnings }

// Close detaches every location and releases the spec ids, IP map
// entries and semaphore counts. It is idempotent; when a step fails the
// others still run and the errors are joined.
func (l *Link) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	var errs []error
	// Detach first, so no hit can look up a spec being released.
	for _, lk := range l.links {
		if err := lk.Close(); err != nil {
			errs = append(errs, fmt.Errorf("detach: %w", err))
		}
	}
	l.links = nil
	for _, s := range l.semaphores {
		if err := s.Release(); err != nil {
			errs = append(errs, err)
		}
	}
	l.semaphores = nil
	if a := l.attacher; a != nil {
		a.mu.Lock()
		var freed []uint32
		for _, ip := range l.ips {
			e := a.ipRefs[ip]
			if e == nil {
				continue
			}
			if e.refs--; e.refs > 0 {
				continue
			}
			delete(a.ipRefs, ip)
			if e.owned {
				freed = append(freed, e.specID)
			}
			if err := a.ipMap.Delete(ip); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				errs = append(errs, fmt.Errorf("delete %#x from %s: %w", ip, ipMapName, err))
			}
		}
		// A slot still named by a shared IP entry stays allocated until
		// the entry goes.
		for _, id := range l.specIDs {
			held := false
			for _, e := range a.ipRefs {
				if e.specID == id {
					e.owned, held = true, true
				}
			}
			if !held {
				freed = append(freed, id)
			}
		}
		a.mu.Unlock()
		// The slots' contents are left as they are: nothing refers to
		// them once the links are gone, and the next attach overwrites.
		a.ids.release(freed)
	}
	l.ips, l.specIDs = nil, nil
	return errors.Join(errs...)
}

// Detach is Close: a USDT link has no separate detached state.
func (l *Link) Detach() error { return l.Close() }

// Update would swap the program of every location; not supported.
func (l *Link) Update(*ebpf.Program) error {
	return fmt.Errorf("usdt link update: %w", ebpf.ErrNotSupported)
}

// Pin is not supported: spec ids and semaphores live in this process.
func (l *Link) Pin(string) error {
	return fmt.Errorf("usdt link pin: %w", ebpf.ErrNotSupported)
}

// Unpin is not supported.
func (l *Link) Unpin() error {
	return fmt.Errorf("usdt link unpin: %w", ebpf.ErrNotSupported)
}

// Info is not supported: a USDT link is several kernel links.
func (l *Link) Info() (*link.Info, error) {
	return nil, fmt.Errorf("usdt link info: %w", ebpf.ErrNotSupported)
}

var _ link.Link = (*Link)(nil)
