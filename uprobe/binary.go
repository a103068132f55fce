package uprobe

import (
	"debug/buildinfo"
	"debug/elf"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/probekit/probekit/debuginfo"
	"github.com/probekit/probekit/internal/safeelf"
	"github.com/probekit/probekit/procmaps"
)

// maxCodeRead bounds the bytes read to decode one function. The largest
// functions seen in real binaries (libjvm.so's interpreter generators,
// Go's runtime.schedinit-style giants) are a few hundred KiB; a symbol
// claiming more is corrupt and would cost memory for nothing.
const maxCodeRead = 16 << 20

// Binary is an ELF file opened for function probes: its executable
// segments, its functions (from .symtab, .dynsym or, for stripped Go
// programs, .gopclntab) and whether it is a Go program.
//
// A Binary holds the file open: code is read from that descriptor, and
// the kernel is given the same file (/proc/self/fd/N), never its name
// again, so a file renamed or replaced after Open changes nothing. Close
// releases it. A Binary is safe for concurrent use.
type Binary struct {
	path    string // what the kernel is given: target.FDPath()
	display string // the target as the caller named it, for messages
	pid     int    // default PID filter (OpenProcess), 0 for all processes
	target  *procmaps.Target
	proc    *procmaps.Process // nil for Open

	file      *safeelf.File
	machine   elf.Machine
	goVersion string
	segments  safeelf.Segments
	funcs     *safeelf.Funcs
	debug     debugInfo // where funcs' static functions came from
	// signatures reads the DWARF for Params, once.
	signatures func() (*debuginfo.Signatures, error)

	closeOnce sync.Once
	closeErr  error
	closed    atomic.Bool
}

// Open opens the ELF file name names: a path, a program on PATH or a
// library name such as "libc.so.6" (procmaps.Resolve), and reads its
// functions. Probes attached through the returned Binary fire in every
// process that maps the file, unless Options.PID filters them. A FIFO,
// socket, device or directory is refused before anything reads it.
func Open(name string) (*Binary, error) {
	t, err := procmaps.OpenTarget(name)
	if err != nil {
		return nil, fmt.Errorf("uprobe: %w", err)
	}
	return newBinary(t, nil)
}

// OpenProcess opens name as process p sees it (procmaps.Process's
// OpenTarget): a path resolved inside the process's root, so that a
// binary inside a container is found and symlinks stay in it, or a bare
// name matched against the objects the process maps ("libc.so.6",
// "python3.11") and then its program and library directories. Probes
// attached through the returned Binary fire only in that process unless
// Options.PID says otherwise. p's identity (PID and start time) is the
// one checked when it was opened: a process that took its PID since
// fails with procmaps.ErrProcessChanged.
func OpenProcess(p *procmaps.Process, name string) (*Binary, error) {
	if p == nil {
		return nil, fmt.Errorf("uprobe: open %s: nil process", name)
	}
	t, err := p.OpenTarget(name)
	if err != nil {
		return nil, fmt.Errorf("uprobe: %w", err)
	}
	return newBinary(t, p)
}

func newBinary(t *procmaps.Target, p *procmaps.Process) (*Binary, error) {
	b := &Binary{path: t.FDPath(), display: t.Name, target: t, proc: p}
	b.signatures = sync.OnceValues(b.loadSignatures)
	if p != nil {
		b.pid = p.PID
	}
	if err := b.parse(t.File); err != nil {
		t.Close()
		return nil, err
	}
	return b, nil
}

// Close releases the file. Functions stay readable; attaching or reading
// code fails afterwards. It is idempotent.
func (b *Binary) Close() error {
	b.closeOnce.Do(func() {
		b.closed.Store(true)
		if b.target != nil {
			b.closeErr = b.target.Close()
		}
	})
	return b.closeErr
}

// parse reads the segments, the functions and the Go build info of the
// ELF file in r.
func (b *Binary) parse(r io.ReaderAt) (err error) {
	// The reader bounds-checks everything; this is a second line of
	// defence for a tracer running as root over others' files.
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("uprobe: %s: malformed ELF (parser panic: %v)", b.display, p)
		}
	}()
	f, err := safeelf.NewFile(r)
	if err != nil {
		return fmt.Errorf("uprobe: %s: not a usable ELF file: %w", b.display, err)
	}
	b.file, b.machine, b.segments = f, f.Machine, f.Loads()
	if len(b.segments) == 0 {
		return fmt.Errorf("uprobe: %s: no PT_LOAD segment (not an executable or shared library)", b.display)
	}
	b.goVersion = goVersion(f, r)
	if b.funcs, err = b.functions(f); err != nil {
		return fmt.Errorf("uprobe: %s: %w", b.display, err)
	}
	return nil
}

// goVersion returns the Go toolchain version of a Go program, "" for any
// other binary. debug/buildinfo reads .go.buildinfo (or finds the blob in
// a data segment when sections are stripped); the section's or
// .gopclntab's presence is the fallback for build info it cannot decode.
// A file whose section headers name none of Go's sections is not asked:
// debug/buildinfo would parse the headers again for nothing.
func goVersion(f *safeelf.File, r io.ReaderAt) (v string) {
	goSections := f.Section(".go.buildinfo") != nil || f.Section(".gopclntab") != nil || f.Section(".note.go.buildid") != nil
	if len(f.Sections) > 0 && !goSections {
		return ""
	}
	// debug/buildinfo uses debug/elf, which is not hardened.
	defer func() {
		if recover() != nil {
			v = ""
		}
	}()
	if bi, err := buildinfo.Read(r); err == nil && bi.GoVersion != "" {
		return bi.GoVersion
	}
	if f.Section(".go.buildinfo") != nil || f.Section(".gopclntab") != nil {
		return "go (version unknown)"
	}
	return ""
}

// Path returns the target as the caller named it (for OpenProcess, as the
// process sees it).
func (b *Binary) Path() string { return b.display }

// Machine returns the ELF machine the code is for; it chooses the
// instruction decoder, never the host.
func (b *Binary) Machine() elf.Machine { return b.machine }

// GoVersion returns the Go version a Go program was built with, or "" for
// native code. A Go program gets RET-site return probes.
func (b *Binary) GoVersion() string { return b.goVersion }

// IsGo reports whether the binary is a Go program.
func (b *Binary) IsGo() bool { return b.goVersion != "" }

// fileOffset translates a link-time virtual address into the file offset
// uprobes take, through the executable PT_LOAD holding it (see
// safeelf.Segments.CodeOffset): an address outside the file-backed part
// of every executable segment has no code to probe.
func (b *Binary) fileOffset(vaddr uint64) (uint64, bool) { return b.segments.CodeOffset(vaddr) }

// readCode reads size bytes of code at file offset off from the open
// file.
func (b *Binary) readCode(off, size uint64) ([]byte, error) {
	if size > maxCodeRead {
		return nil, fmt.Errorf("uprobe: %s: function of %d bytes exceeds the %d-byte decode limit", b.display, size, maxCodeRead)
	}
	buf, err := b.file.ReadAt(off, size, maxCodeRead)
	if err != nil {
		return nil, fmt.Errorf("uprobe: %s: read %d bytes of code at offset %#x: %w", b.display, size, off, err)
	}
	return buf, nil
}

func (b *Binary) String() string {
	var sb strings.Builder
	sb.WriteString(b.display)
	if b.pid != 0 {
		fmt.Fprintf(&sb, " (pid %d)", b.pid)
	}
	return sb.String()
}
