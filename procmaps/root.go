package procmaps

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Paths in maps are as the target's mount namespace sees them. Opening
// "/proc/PID/root" + path from here is not enough: an absolute symlink
// met on the way resolves against *our* root, and ".." can climb out of
// the container. openat2 with
// RESOLVE_IN_ROOT (Linux 5.6, commit fddb5d430ad9) treats the directory
// fd as "/" for the whole walk, symlinks and ".." included;
// RESOLVE_NO_MAGICLINKS refuses /proc/*/fd-style links that would jump
// anywhere. What we open is then checked by device and inode against the
// maps entry.

const (
	// resolveRetries bounds retries of openat2, which fails with EAGAIN
	// when a rename or mount raced the RESOLVE_IN_ROOT walk (openat2(2)).
	resolveRetries = 8

	inRoot = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS
)

// root is an open handle on a process's root directory.
type root struct {
	fd     int
	prefix string // "/proc/PID/root"
	// same is set when the process shares our mount namespace and root
	// directory, so its paths are ours.
	same bool
}

// openRoot opens /proc/PID/root. Callers check the process's identity
// after it (Mappings does), which proves the handle is p's root.
func (p *Process) openRoot() (*root, error) {
	prefix := p.path("root")
	fd, err := unix.Open(prefix, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		if cerr := p.Check(); cerr != nil {
			return nil, cerr
		}
		return nil, wrapProcErr(p.PID, "root", &os.PathError{Op: "open", Path: prefix, Err: err})
	}
	return &root{fd: fd, prefix: prefix, same: p.sharesView(fd)}, nil
}

func (r *root) close() { unix.Close(r.fd) }

// checkedRoot opens p's root and then checks p's identity, which proves
// the handle is p's root and not that of a process that took its PID.
func (p *Process) checkedRoot() (*root, error) {
	r, err := p.openRoot()
	if err != nil {
		return nil, err
	}
	if err := p.Check(); err != nil {
		r.close()
		return nil, err
	}
	return r, nil
}

// sharesView reports whether p has our mount namespace and root.
func (p *Process) sharesView(rootFd int) bool {
	var ours, theirs unix.Stat_t
	if unix.Stat("/proc/self/ns/mnt", &ours) != nil || unix.Stat(p.path("ns/mnt"), &theirs) != nil ||
		ours.Dev != theirs.Dev || ours.Ino != theirs.Ino {
		return false
	}
	if unix.Stat("/proc/self/root", &ours) != nil || unix.Fstat(rootFd, &theirs) != nil {
		return false
	}
	return ours.Dev == theirs.Dev && ours.Ino == theirs.Ino
}

// relative strips the leading slashes: openat2 then walks from the root
// fd. A path that already starts with /proc/PID/root is not prefixed
// twice (iovisor/bcc#2495).
func (r *root) relative(path string) string {
	if rest, ok := strings.CutPrefix(path, r.prefix); ok && (rest == "" || rest[0] == '/') {
		path = rest
	}
	path = strings.TrimLeft(path, "/")
	if path == "" {
		return "."
	}
	return path
}

// open resolves path inside the root and opens it read-only.
func (r *root) open(path string) (*os.File, error) {
	rel := r.relative(path)
	return openRegular(r.fd, rel, 0, inRoot, r.prefix+"/"+rel)
}

// openRegular opens a regular file with openat2, without blocking on a
// FIFO planted where a file was expected; flags adds open flags
// (O_NOFOLLOW).
func openRegular(dirfd int, path string, flags, resolve uint64, name string) (*os.File, error) {
	how := unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NOCTTY | unix.O_NONBLOCK | flags,
		Resolve: resolve,
	}
	var fd int
	var err error
	for range resolveRetries {
		fd, err = unix.Openat2(dirfd, path, &how)
		if err != unix.EAGAIN && err != unix.EINTR {
			break
		}
	}
	if err == unix.ENOSYS {
		return nil, &os.PathError{Op: "openat2", Path: name,
			Err: fmt.Errorf("%w (openat2 needs Linux 5.6)", err)}
	}
	if err == unix.ENXIO {
		// open(2) of a Unix domain socket.
		return nil, &os.PathError{Op: "open", Path: name, Err: fmt.Errorf("%w (a socket)", ErrNotRegular)}
	}
	if err != nil {
		return nil, &os.PathError{Op: "openat2", Path: name, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "fstat", Path: name, Err: err}
	}
	if kind := fileKind(st.Mode); kind != "" {
		unix.Close(fd)
		return nil, &os.PathError{Op: "open", Path: name, Err: fmt.Errorf("%w (%s)", ErrNotRegular, kind)}
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "fcntl", Path: name, Err: err}
	}
	return os.NewFile(uintptr(fd), name), nil
}

// fileKind names a file type that is not a regular file, "" for one.
func fileKind(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return ""
	case unix.S_IFIFO:
		return "a FIFO"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFDIR:
		return "a directory"
	case unix.S_IFCHR:
		return "a character device"
	case unix.S_IFBLK:
		return "a block device"
	}
	return "not a regular file"
}

// OpenInRoot opens the regular file at path as the process sees it:
// resolved inside the process's root directory, so that absolute
// symlinks and ".." stay in the container. A path already prefixed with
// /proc/PID/root is accepted as well. The file's name is
// /proc/PID/root/PATH.
func (p *Process) OpenInRoot(path string) (*os.File, error) {
	r, err := p.checkedRoot()
	if err != nil {
		return nil, err
	}
	defer r.close()
	f, err := r.open(path)
	if err != nil {
		return nil, fmt.Errorf("pid %d: %w", p.PID, err)
	}
	return f, nil
}

// OpenObject opens the file of o (from p.Objects or p.Object) and checks
// that it is that file (device and inode). It tries, in order: the path
// inside the process's root; the path from our own root (a process that
// chroot()ed without a mount namespace of its own has maps paths outside
// its root); /proc/PID/map_files, which reaches deleted and unreachable
// files but needs CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE. The error
// lists every attempt.
func (p *Process) OpenObject(o *Object) (*os.File, error) {
	r, err := p.checkedRoot()
	if err != nil {
		return nil, err
	}
	defer r.close()
	f, _, err := r.openObject(p, o)
	return f, err
}

// openObject implements OpenObject and returns the path that worked
// (see Object.HostPath).
func (r *root) openObject(p *Process, o *Object) (*os.File, string, error) {
	var errs []error
	try := func(f *os.File, err error) bool {
		if err != nil {
			errs = append(errs, err)
			return false
		}
		if err := checkIdentity(f, o.ID()); err != nil {
			f.Close()
			errs = append(errs, err)
			return false
		}
		return true
	}
	if !o.Deleted {
		if f, err := r.open(o.Path); try(f, err) {
			if r.same {
				return f, o.Path, nil
			}
			return f, r.prefix + o.Path, nil
		}
		if !r.same {
			if f, err := openRegular(unix.AT_FDCWD, o.Path, 0, unix.RESOLVE_NO_MAGICLINKS, o.Path); try(f, err) {
				return f, o.Path, nil
			}
		}
	}
	if len(o.Mappings) > 0 {
		m := &o.Mappings[0]
		// The kernel names map_files entries "%lx-%lx" (fs/proc/base.c),
		// without the zero padding of maps.
		path := p.path("map_files/" + strconv.FormatUint(m.Start, 16) + "-" + strconv.FormatUint(m.End, 16))
		f, err := openRegular(unix.AT_FDCWD, path, 0, 0, path)
		if errors.Is(err, os.ErrPermission) {
			err = fmt.Errorf("%w (map_files needs CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE)", err)
		}
		if try(f, err) {
			return f, path, nil
		}
	}
	return nil, "", fmt.Errorf("pid %d: cannot open %s (%v): %w", p.PID, o.Path, o.ID(), errors.Join(errs...))
}

// checkIdentity fails with ErrIdentity unless f is the file id.
func checkIdentity(f *os.File, id FileID) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return &os.PathError{Op: "fstat", Path: f.Name(), Err: err}
	}
	if st.Dev != id.Dev || st.Ino != id.Inode {
		got := FileID{Dev: st.Dev, Inode: st.Ino}
		return fmt.Errorf("%s is %v, maps has %v: %w", f.Name(), got, id, ErrIdentity)
	}
	return nil
}
