package attach

import (
	"errors"
	"fmt"
	"strings"
	"syscall"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/probekit/probekit/internal/features"
)

// File is one file to attach in.
type File struct {
	// Path is what the kernel opens: /proc/self/fd/N of the descriptor
	// that was opened and checked (procmaps.Target.FDPath), or a host
	// path.
	Path string
	// Name is the file as the caller named it: errors and Site.Path
	// carry it, never a /proc/self/fd name.
	Name string
	// Sites are the places to attach in the file.
	Sites []Site
}

// Site is one place to attach.
type Site struct {
	// Path is the Name of the site's File (set by Attach).
	Path string
	// Probe names what the site belongs to, for messages: "USDT
	// python:function__entry", "entry of malloc".
	Probe string
	// Offset is the file offset of the instruction to probe.
	Offset uint64
	// RefCtrOffset is the file offset of a USDT semaphore that the
	// kernel raises while the site is attached (Linux 4.20); 0 for none.
	RefCtrOffset uint64
	// Cookie is what bpf_get_attach_cookie() returns at this site (Linux
	// 5.15; a non-zero cookie fails with ebpf.ErrNotSupported before).
	Cookie uint64
}

func (s *Site) String() string {
	return fmt.Sprintf("%s at %s+%#x", s.Probe, s.Path, s.Offset)
}

// Options tune Attach. The zero value (or nil) attaches entry probes that
// fire in every process that maps the file.
type Options struct {
	// PID limits the probes to one process (in the caller's PID
	// namespace); 0 means every process that maps the file, now and
	// later.
	PID int
	// Return attaches uretprobes: the program runs when the function
	// whose first instruction is the site returns.
	Return bool
	// Warnings are kept on the Link (Link.Warnings).
	Warnings []error
}

// Attach attaches prog at the sites of files: one uprobe_multi link per
// file where the kernel has uprobe_multi, else one perf-event uprobe per
// site (see Prepare). It is all-or-nothing: on error nothing stays
// attached. The caller registers what the link must release with
// Link.OnClose.
func Attach(prog *ebpf.Program, files []File, opts *Options) (*Link, error) {
	if opts == nil {
		opts = &Options{}
	}
	if prog == nil {
		return nil, errors.New("attach: nil program")
	}
	if opts.PID < 0 {
		return nil, fmt.Errorf("attach: invalid PID %d (0 means every process)", opts.PID)
	}
	multi, err := features.Have(features.UprobeMulti)
	if err != nil {
		return nil, fmt.Errorf("attach: probe uprobe_multi support: %w", err)
	}
	loadedMulti := features.LoadedForUprobeMulti(prog.FD())
	switch {
	case multi && !loadedMulti:
		return nil, fmt.Errorf("attach %s: %w: this kernel attaches through uprobe_multi links, which need the attach type at load time", progName(prog), ErrNotPrepared)
	case !multi && loadedMulti:
		return nil, fmt.Errorf("attach %s: %w: it was loaded for uprobe_multi, which is not used here (prepared before uprobe_multi was ruled out?)", progName(prog), ErrNotPrepared)
	}

	l := &Link{warnings: opts.Warnings}
	for _, f := range files {
		if len(f.Sites) == 0 {
			continue
		}
		var err error
		if multi {
			err = l.attachMulti(prog, f, opts)
		} else {
			err = l.attachPerf(prog, f, opts)
		}
		if err != nil {
			return nil, errors.Join(err, l.Close())
		}
		for _, s := range f.Sites {
			s.Path = f.Name
			l.sites = append(l.sites, s)
		}
	}
	if len(l.sites) == 0 {
		return nil, errors.New("attach: no site to attach")
	}
	return l, nil
}

func progName(prog *ebpf.Program) string {
	if info, err := prog.Info(); err == nil && info.Name != "" {
		return "program " + info.Name
	}
	return "program"
}

// attachMulti attaches every site of f with one uprobe_multi link.
func (l *Link) attachMulti(prog *ebpf.Program, f File, opts *Options) error {
	ex, err := link.OpenExecutable(f.Path)
	if err != nil {
		return fmt.Errorf("%s: %w", f.Name, err)
	}
	mo := &link.UprobeMultiOptions{PID: uint32(opts.PID)}
	var anyRef, anyCookie bool
	for _, s := range f.Sites {
		mo.Addresses = append(mo.Addresses, s.Offset)
		mo.RefCtrOffsets = append(mo.RefCtrOffsets, s.RefCtrOffset)
		mo.Cookies = append(mo.Cookies, s.Cookie)
		anyRef = anyRef || s.RefCtrOffset != 0
		anyCookie = anyCookie || s.Cookie != 0
	}
	if !anyRef {
		mo.RefCtrOffsets = nil
	}
	if !anyCookie {
		mo.Cookies = nil
	}
	var lk link.Link
	if opts.Return {
		lk, err = ex.UretprobeMulti(nil, prog, mo)
	} else {
		lk, err = ex.UprobeMulti(nil, prog, mo)
	}
	if err != nil {
		// One link for every site: blame a site with a semaphore when the
		// kernel says EINVAL, its answer to a ref_ctr conflict.
		blame := f.Sites[0]
		for _, s := range f.Sites {
			if s.RefCtrOffset != 0 {
				blame = s
				break
			}
		}
		blame.Path = f.Name
		return explain(err, &blame, len(f.Sites), "uprobe_multi")
	}
	l.links = append(l.links, lk)
	return nil
}

// attachPerf attaches one perf-event uprobe per site of f.
func (l *Link) attachPerf(prog *ebpf.Program, f File, opts *Options) error {
	ex, err := link.OpenExecutable(f.Path)
	if err != nil {
		return fmt.Errorf("%s: %w", f.Name, err)
	}
	for _, s := range f.Sites {
		uo := &link.UprobeOptions{Address: s.Offset, RefCtrOffset: s.RefCtrOffset, Cookie: s.Cookie, PID: opts.PID}
		var lk link.Link
		if opts.Return {
			lk, err = ex.Uretprobe("", prog, uo)
		} else {
			lk, err = ex.Uprobe("", prog, uo)
		}
		if err != nil {
			s.Path = f.Name
			return explain(err, &s, 1, "perf-event uprobe")
		}
		l.links = append(l.links, lk)
	}
	return nil
}

// explain names the site and the remedy of a failed attach.
func explain(err error, s *Site, n int, how string) error {
	where := s.String()
	if n > 1 {
		where = fmt.Sprintf("%s (one %s link for %d sites)", where, how, n)
	}
	// cilium/ebpf formats the perf link's errno without wrapping it.
	if errors.Is(err, syscall.EMFILE) || strings.Contains(err.Error(), syscall.EMFILE.Error()) {
		return fmt.Errorf("%s: %w (without uprobe_multi each site holds a file descriptor: raise RLIMIT_NOFILE)", where, err)
	}
	if s.RefCtrOffset != 0 && errors.Is(err, syscall.EINVAL) {
		return fmt.Errorf("%s: semaphore at file offset %#x: %w (%w)", where, s.RefCtrOffset, ErrRefCtrConflict, err)
	}
	return fmt.Errorf("%s: %w", where, err)
}
