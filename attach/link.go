package attach

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// Link is an attachment made by usdt or uprobe: the kernel links of its
// sites (one uprobe_multi link per file, or one perf-event link per site)
// and what they hold (spec map slots, IP map entries, semaphore counts).
// Close releases all of it.
//
// Link satisfies cilium/ebpf's link.Link. That interface has an
// unexported method, so Link embeds a nil link.Link to carry it; every
// exported method is Link's own and the embedded value is never used.
type Link struct {
	link.Link

	mu       sync.Mutex
	closed   bool
	links    []link.Link
	before   []func()
	release  []func() error
	sites    []Site
	warnings []error
}

var _ link.Link = (*Link)(nil)

// Sites lists the sites attached, in the order they were given.
func (l *Link) Sites() []Site { return l.sites }

// Warnings lists what did not stop the attach but the caller should know:
// for USDT, arguments the BPF side cannot read (bpf_usdt_arg() returns
// -EINVAL for them while the others read normally).
func (l *Link) Warnings() []error { return l.warnings }

// OnClose registers release to run when the link closes, after every
// kernel link is detached (so no hit can see what it releases). Releases
// run in the reverse order of registration.
func (l *Link) OnClose(release func() error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.release = append(l.release, release)
}

// BeforeDetach registers check to run when the link closes, before any
// kernel link is detached: the uprobes are still in place while it runs.
func (l *Link) BeforeDetach(check func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.before = append(l.before, check)
}

// Close runs the checks registered with BeforeDetach, detaches every
// site, then runs the releases registered with OnClose. It is idempotent; when a step fails the others still run and
// the errors are joined.
func (l *Link) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	for _, check := range l.before {
		check()
	}
	var errs []error
	for _, lk := range l.links {
		if err := lk.Close(); err != nil {
			errs = append(errs, fmt.Errorf("detach: %w", err))
		}
	}
	for _, r := range slices.Backward(l.release) {
		if err := r(); err != nil {
			errs = append(errs, err)
		}
	}
	l.links, l.before, l.release = nil, nil, nil
	return errors.Join(errs...)
}

// Detach is Close: the sites hold process-local state (spec ids,
// semaphore counts), so a link cannot outlive its process detached.
func (l *Link) Detach() error { return l.Close() }

// Update replaces the program of a link made of one kernel link; the
// kernel supports it for neither uprobe_multi nor several perf links.
func (l *Link) Update(prog *ebpf.Program) error {
	return l.single("update", func(x link.Link) error { return x.Update(prog) })
}

// Pin is not supported: what the link holds lives in this process.
func (l *Link) Pin(string) error {
	return fmt.Errorf("pin a probekit link: %w (spec ids and semaphore counts live in this process)", ebpf.ErrNotSupported)
}

// Unpin is not supported (see Pin).
func (l *Link) Unpin() error {
	return fmt.Errorf("unpin a probekit link: %w", ebpf.ErrNotSupported)
}

// Info describes the kernel link of a link made of one.
func (l *Link) Info() (*link.Info, error) {
	var info *link.Info
	err := l.single("info", func(x link.Link) (err error) {
		info, err = x.Info()
		return err
	})
	return info, err
}

func (l *Link) single(op string, f func(link.Link) error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.closed:
		return fmt.Errorf("%s: link is closed", op)
	case len(l.links) == 1:
		return f(l.links[0])
	}
	return fmt.Errorf("%s a probekit link of %d kernel links: %w", op, len(l.links), ebpf.ErrNotSupported)
}

// Join makes one Link of several: closing it closes each. The parts must
// not be used on their own afterwards.
func Join(parts ...*Link) *Link {
	j := &Link{}
	for _, p := range parts {
		j.sites = append(j.sites, p.sites...)
		j.warnings = append(j.warnings, p.warnings...)
		j.release = append(j.release, p.Close)
	}
	return j
}
