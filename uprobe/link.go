package uprobe

import (
	"errors"
	"fmt"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// sitesLink is the link.Link of one probe: one uprobe_multi link, or one
// perf-event link per site. It embeds the first link only to satisfy
// link.Link's unexported method; every exported method is its own.
type sitesLink struct {
	link.Link

	mu    sync.Mutex
	links []link.Link // nil once closed
}

func newSitesLink(links []link.Link) *sitesLink {
	return &sitesLink{Link: links[0], links: links}
}

// Close detaches every site. It releases all of them even when one fails
// (errors joined) and is idempotent.
func (l *sitesLink) Close() error {
	l.mu.Lock()
	links := l.links
	l.links = nil
	l.mu.Unlock()
	return closeAll(links)
}

func closeAll(links []link.Link) error {
	var errs []error
	for _, l := range links {
		if err := l.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Update replaces the program of a single-link probe (uprobe_multi links
// do not support it either, so in practice it reports ErrNotSupported).
func (l *sitesLink) Update(prog *ebpf.Program) error {
	return l.single("update", func(x link.Link) error { return x.Update(prog) })
}

// Pin pins a single-link probe; a probe made of several perf-event links
// cannot be pinned as one.
func (l *sitesLink) Pin(path string) error {
	return l.single("pin", func(x link.Link) error { return x.Pin(path) })
}

func (l *sitesLink) Unpin() error {
	return l.single("unpin", func(x link.Link) error { return x.Unpin() })
}

func (l *sitesLink) Detach() error {
	return l.single("detach", func(x link.Link) error { return x.Detach() })
}

// Info describes the first link (the only one in uprobe_multi mode).
func (l *sitesLink) Info() (*link.Info, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.links == nil {
		return nil, errors.New("uprobe: link is closed")
	}
	return l.links[0].Info()
}

func (l *sitesLink) single(op string, f func(link.Link) error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch len(l.links) {
	case 0:
		return fmt.Errorf("uprobe: %s: link is closed", op)
	case 1:
		return f(l.links[0])
	}
	return fmt.Errorf("uprobe: %s a probe of %d perf-event links: %w (use Options.Mode = Multi)", op, len(l.links), ebpf.ErrNotSupported)
}
