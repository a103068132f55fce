package procmaps

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// A target is the file a user names to probe: a path, a program on PATH
// or a library name ("libc.so.6"), either as the tracer sees it or as a
// process sees it (inside its container). Both kinds of probe open their
// targets here, so that every file reaches the kernel the same way:
// opened once, as a regular file, without blocking, and handed to the
// kernel as /proc/self/fd/N of that descriptor, never by its name again.

// ErrNotRegular: the target is a FIFO, socket, device or directory.
// Opening a FIFO for reading would block until a writer appears, so such
// files are refused before anything reads them.
var ErrNotRegular = errors.New("not a regular file")

// LibraryDirs are searched for a target given as a bare library name
// ("libc.so.6"), after the directories of /etc/ld.so.conf.d: the dynamic
// linker's trusted directories, multiarch first as Debian lays them out.
var LibraryDirs = []string{
	"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu",
	"/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
	"/lib64", "/usr/lib64", "/lib", "/usr/lib", "/usr/local/lib",
}

// programDirs are searched inside a process's root for a bare program
// name (the process's own PATH is not consulted: it may lie).
var programDirs = []string{
	"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin",
}

// Target is an opened target file.
type Target struct {
	// File is the open descriptor; the kernel is given FDPath.
	File *os.File
	// Name is the target as the caller gave it, for messages.
	Name string
	// Path is where it was found: a host path, or for a process target
	// the path inside the process's mount namespace.
	Path string
	// ID is the opened file's identity.
	ID FileID
	// Process is set for a target opened as a process sees it.
	Process *Process
}

// FDPath names the open descriptor ("/proc/self/fd/N"): what the kernel
// and any later reader get, so that a rename or a symlink swapped in
// after the open changes nothing.
func (t *Target) FDPath() string { return fmt.Sprintf("/proc/self/fd/%d", t.File.Fd()) }

// Close closes the descriptor.
func (t *Target) Close() error { return t.File.Close() }

// String is the name the caller gave, with the process when there is one.
func (t *Target) String() string {
	if t.Process != nil {
		return fmt.Sprintf("%s (pid %d)", t.Name, t.Process.PID)
	}
	return t.Name
}

func newTarget(f *os.File, name, path string, p *Process) (*Target, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, &os.PathError{Op: "fstat", Path: name, Err: err}
	}
	return &Target{File: f, Name: name, Path: path, ID: FileID{Dev: st.Dev, Inode: st.Ino}, Process: p}, nil
}

// OpenFile opens the regular file at path read-only without blocking: a
// FIFO, socket, device or directory fails at once with ErrNotRegular.
// The returned file is in blocking mode.
func OpenFile(path string) (*os.File, error) {
	return openRegular(unix.AT_FDCWD, path, 0, 0, path)
}

// Resolve turns a target name into a host path: name itself when it
// contains a '/' or names a file in the current directory; else the first
// ELF program of that name on PATH (a wrapper script or version-manager
// shim earlier on PATH has no probes); else a library of that name in the
// directories of /etc/ld.so.conf.d and LibraryDirs.
func Resolve(name string) (string, error) {
	if name == "" {
		return "", fmt.Errorf("empty target: %w", os.ErrInvalid)
	}
	if strings.ContainsRune(name, '/') {
		return name, nil
	}
	if st, err := os.Stat(name); err == nil && st.Mode().IsRegular() {
		return name, nil
	}
	if p := lookPathELF(name); p != "" {
		return p, nil
	}
	for _, dir := range append(ldConfDirs(), LibraryDirs...) {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: %w: not a file, not on PATH, not in the library directories (give a path)", name, os.ErrNotExist)
}

// OpenTarget resolves name (see Resolve) and opens it (see OpenFile).
// Errors name name as given.
func OpenTarget(name string) (*Target, error) {
	path, err := Resolve(name)
	if err != nil {
		return nil, err
	}
	f, err := OpenFile(path)
	if err != nil {
		return nil, renamePathErr(err, name, path)
	}
	return newTarget(f, name, path, nil)
}

// OpenTarget opens name as process p sees it. A path that p maps (as
// its maps file names it) is opened as OpenObject opens that object, with
// its identity checked: the maps path of a process that chroot()ed
// without a mount namespace of its own is the tracer's path, outside its
// root. Another path is resolved inside p's root (absolute symlinks and
// ".." stay in its container); a relative path is taken from the
// tracer's working directory first made absolute.
// A bare name is first matched against the base names of the objects p
// has mapped ("libc.so.6", "python3.11"), then looked up in the program
// and library directories inside p's root.
func (p *Process) OpenTarget(name string) (*Target, error) {
	if name == "" {
		return nil, fmt.Errorf("pid %d: empty target: %w", p.PID, os.ErrInvalid)
	}
	if strings.ContainsRune(name, '/') {
		path := name
		if !filepath.IsAbs(path) {
			abs, err := filepath.Abs(path)
			if err != nil {
				return nil, err
			}
			path = abs
		}
		if objs, err := p.Objects(); err == nil {
			for i := range objs {
				if objs[i].Path == path {
					f, err := p.OpenObject(&objs[i])
					if err != nil {
						return nil, renamePathErr(err, name, path)
					}
					return newTarget(f, name, path, p)
				}
			}
		}
		f, err := p.OpenInRoot(path)
		if err != nil {
			return nil, renamePathErr(err, name, path)
		}
		return newTarget(f, name, path, p)
	}
	if objs, err := p.Objects(); err == nil {
		for i := range objs {
			o := &objs[i]
			if filepath.Base(o.Path) != name {
				continue
			}
			f, err := p.OpenObject(o)
			if err != nil {
				return nil, renamePathErr(err, name, o.Path)
			}
			return newTarget(f, name, o.Path, p)
		}
	}
	r, err := p.checkedRoot()
	if err != nil {
		return nil, err
	}
	defer r.close()
	for _, dir := range append(programDirs, LibraryDirs...) {
		path := dir + "/" + name
		f, err := r.open(path)
		if err != nil {
			continue
		}
		return newTarget(f, name, path, p)
	}
	return nil, fmt.Errorf("pid %d: %s: %w: not mapped by the process, not in its program or library directories (give a path)", p.PID, name, os.ErrNotExist)
}

// renamePathErr makes an open error name the target as the user gave it.
func renamePathErr(err error, name, path string) error {
	var pe *os.PathError
	if errors.As(err, &pe) && name != path {
		return fmt.Errorf("%s (%s): %w", name, path, err)
	}
	return err
}

// lookPathELF finds name on PATH, preferring the first ELF file. Without
// an ELF candidate it returns the first match, whose error then says it
// is not ELF.
func lookPathELF(name string) string {
	first := ""
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		if dir == "" {
			continue
		}
		p, err := exec.LookPath(filepath.Join(dir, name))
		if err != nil {
			continue
		}
		if isELF(p) {
			return p
		}
		if first == "" {
			first = p
		}
	}
	return first
}

// LookPath finds a program on PATH as Resolve does: the first ELF file of
// that name, else the first file of that name, else "".
func LookPath(name string) string { return lookPathELF(name) }

func isELF(path string) bool {
	f, err := OpenFile(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var magic [4]byte
	_, err = io.ReadFull(f, magic[:])
	return err == nil && string(magic[:]) == "\x7fELF"
}

// ldConfDirs returns the directories listed in /etc/ld.so.conf.d/*.conf
// (include lines are not followed).
func ldConfDirs() []string {
	confs, _ := filepath.Glob("/etc/ld.so.conf.d/*.conf")
	var dirs []string
	for _, c := range confs {
		data, err := os.ReadFile(c)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			line = strings.TrimSpace(line)
			if strings.HasPrefix(line, "/") {
				dirs = append(dirs, line)
			}
		}
	}
	return dirs
}
