package uprobe

import (
	"debug/buildinfo"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
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
// A Binary holds no file descriptor: code is read on demand, after
// checking that the file is still the one that was parsed. It is safe for
// concurrent use.
type Binary struct {
	path    string // path used to open and attach (host view)
	display string // path as given by the caller, for messages
	pid     int    // default PID filter (OpenProcess), 0 for all processes
	ident   fileIdentity

	machine   elf.Machine
	goVersion string
	segments  []segment

	funcs   []Function       // sorted by address, then name
	byName  map[string][]int // Name -> indexes into funcs
	others  map[string]elf.SymType
	skipped int // function symbols outside any executable segment
}

// fileIdentity tells whether the file at a path is still the one parsed.
type fileIdentity struct {
	dev, ino uint64
	size     int64
	mtime    time.Time
}

func identify(fi os.FileInfo) fileIdentity {
	id := fileIdentity{size: fi.Size(), mtime: fi.ModTime()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		id.dev, id.ino = uint64(st.Dev), st.Ino
	}
	return id
}

// segment is one PT_LOAD program header.
type segment struct {
	vaddr, memsz, off, filesz uint64
	exec                      bool
}

// Open parses the ELF file at path. Probes attached through the returned
// Binary fire in every process that maps the file, unless Options.PID
// filters them.
func Open(path string) (*Binary, error) {
	return open(path, path, 0)
}

// OpenProcess parses the file that process pid sees at path (an absolute
// path inside the process's mount namespace, as /proc/PID/maps shows it),
// opening it through /proc/PID/root so that a binary inside a container is
// found. Probes attached through the returned Binary fire only in that
// process unless Options.PID says otherwise.
//
// /proc/PID/root resolves absolute symlinks against the tracer's root, so
// pass the path /proc/PID/maps shows (symlinks already resolved).
func OpenProcess(pid int, path string) (*Binary, error) {
	if pid <= 0 {
		return nil, fmt.Errorf("uprobe: open %s: invalid pid %d", path, pid)
	}
	if !filepath.IsAbs(path) {
		return nil, fmt.Errorf("uprobe: open %s in pid %d: path must be absolute (as in /proc/%d/maps)", path, pid, pid)
	}
	host := filepath.Join("/proc", strconv.Itoa(pid), "root", filepath.Clean(path))
	return open(host, path, pid)
}

func open(path, display string, pid int) (*Binary, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("uprobe: open %s: %w", display, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("uprobe: open %s: %w", display, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("uprobe: open %s: not a regular file", display)
	}

	b := &Binary{path: path, display: display, pid: pid, ident: identify(fi)}
	if err := b.parse(f); err != nil {
		return nil, err
	}
	return b, nil
}

// parse reads the segments, the functions and the Go build info of the
// ELF file in r.
func (b *Binary) parse(r io.ReaderAt) (err error) {
	// debug/elf is not hardened against hostile files (golang/go#47445,
	// #70584); a tracer running as root parses binaries others control, so
	// a panic in it becomes an error naming the file.
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("uprobe: %s: malformed ELF (parser panic: %v)", b.display, r)
		}
	}()
	ef, err := elf.NewFile(r)
	if err != nil {
		return fmt.Errorf("uprobe: %s: not a usable ELF file: %w", b.display, err)
	}
	b.machine = ef.Machine
	for _, p := range ef.Progs {
		if p.Type != elf.PT_LOAD {
			continue
		}
		b.segments = append(b.segments, segment{
			vaddr: p.Vaddr, memsz: p.Memsz, off: p.Off, filesz: p.Filesz,
			exec: p.Flags&elf.PF_X != 0,
		})
	}
	if len(b.segments) == 0 {
		return fmt.Errorf("uprobe: %s: no PT_LOAD segment (not an executable or shared library)", b.display)
	}
	b.goVersion = goVersion(ef, r)
	return b.loadFunctions(ef)
}

// goVersion returns the Go toolchain version of a Go program, "" for any
// other binary. debug/buildinfo reads .go.buildinfo (or finds the blob in
// a data segment when sections are stripped); the section's or the
// runtime.buildVersion symbol's presence is the fallback for build info
// it cannot decode.
func goVersion(ef *elf.File, r io.ReaderAt) (v string) {
	defer func() {
		if recover() != nil {
			v = ""
		}
	}()
	if bi, err := buildinfo.Read(r); err == nil && bi.GoVersion != "" {
		return bi.GoVersion
	}
	if ef.Section(".go.buildinfo") != nil || ef.Section(".gopclntab") != nil {
		return "go (version unknown)"
	}
	return ""
}

// Path returns the path the Binary was opened with (for OpenProcess, the
// path inside the process).
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
// uprobes take: off = vaddr - p_vaddr + p_offset of the PT_LOAD holding it
// (ELF gABI, program header; never one delta for the whole file, since
// linkers emit several executable segments, libbpf/libbpf-bootstrap#90).
// Only executable segments qualify, and the address must be backed by the
// file (below p_filesz), or there is no code to probe.
func (b *Binary) fileOffset(vaddr uint64) (uint64, bool) {
	for _, s := range b.segments {
		if !s.exec || vaddr < s.vaddr || vaddr-s.vaddr >= s.filesz || vaddr-s.vaddr >= s.memsz {
			continue
		}
		return vaddr - s.vaddr + s.off, true
	}
	return 0, false
}

// readCode reads size bytes at file offset off, after checking that the
// file at the path is still the one parsed (a replaced binary would give
// return sites of other code).
func (b *Binary) readCode(off, size uint64) ([]byte, error) {
	if size > maxCodeRead {
		return nil, fmt.Errorf("uprobe: %s: function of %d bytes exceeds the %d-byte decode limit", b.display, size, maxCodeRead)
	}
	f, err := os.Open(b.path)
	if err != nil {
		return nil, fmt.Errorf("uprobe: read code of %s: %w", b.display, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("uprobe: read code of %s: %w", b.display, err)
	}
	if identify(fi) != b.ident {
		return nil, fmt.Errorf("uprobe: %s changed since it was opened (reopen it)", b.display)
	}
	buf := make([]byte, size)
	if _, err := f.ReadAt(buf, int64(off)); err != nil {
		return nil, fmt.Errorf("uprobe: %s: read %d bytes at offset %#x: %w", b.display, size, off, err)
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
