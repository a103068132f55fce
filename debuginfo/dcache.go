package debuginfo

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// The debuginfod cache is a directory another program (the elfutils
// client) and, under sudo, another user may share; what probekit reads
// there it trusts as the debug file of a traced object. So a directory
// of the cache (CACHE, CACHE/HEX) and a file in it (CACHE/HEX/debuginfo,
// CACHE/cache_miss_s) are used only when:
//
//   - the final component is not a symbolic link (each is opened with
//     O_NOFOLLOW, a file relative to its directory already checked);
//   - a file is a regular file (opened with O_NONBLOCK: a FIFO does not
//     block) and a directory a directory;
//   - it is owned by the effective user or by root, and writable by
//     neither its group nor others.
//
// Anything else is refused with a *CacheError, said as a warning: the
// debug file is then not taken from the cache nor stored there.

// CacheError is a debuginfod cache directory or file refused: a symbolic
// link, not a directory or regular file, another user's, or writable by
// others.
type CacheError struct {
	Path string
	Msg  string
}

func (e *CacheError) Error() string {
	return fmt.Sprintf("debuginfod cache %s: %s (not used)", e.Path, e.Msg)
}

// checkCacheOwner checks st is of type kind, owned by the effective user
// or root, and writable by neither its group nor others.
func checkCacheOwner(st *unix.Stat_t, kind uint32, path string) error {
	euid := os.Geteuid()
	switch {
	case st.Mode&unix.S_IFMT != kind && kind == unix.S_IFDIR:
		return &CacheError{path, "not a directory"}
	case st.Mode&unix.S_IFMT != kind:
		return &CacheError{path, "not a regular file"}
	case int(st.Uid) != euid && st.Uid != 0:
		return &CacheError{path, fmt.Sprintf("owned by uid %d, neither the user (uid %d) nor root", st.Uid, euid)}
	case st.Mode&0o022 != 0:
		return &CacheError{path, fmt.Sprintf("mode %#o: writable by others", st.Mode&0o7777)}
	}
	return nil
}

// cacheDir is an open, checked directory of the debuginfod cache.
type cacheDir struct {
	fd   int
	path string
}

// openCacheDir opens and checks the directory path, relative to parent
// (nil: path is absolute or relative to the working directory), creating
// it 0700 first when create is set. A missing one is an error matching
// os.ErrNotExist.
func openCacheDir(parent *cacheDir, name string, create bool) (*cacheDir, error) {
	dirfd, path := unix.AT_FDCWD, name
	if parent != nil {
		dirfd, path = parent.fd, filepath.Join(parent.path, name)
	}
	if create {
		if parent == nil {
			if err := os.MkdirAll(name, 0o700); err != nil {
				return nil, err
			}
		} else if err := unix.Mkdirat(dirfd, name, 0o700); err != nil && err != unix.EEXIST {
			return nil, &os.PathError{Op: "mkdir", Path: path, Err: err}
		}
	}
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if err == unix.ELOOP || err == unix.ENOTDIR {
			return nil, &CacheError{path, "not a directory (or a symbolic link)"}
		}
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	if err := checkCacheOwner(&st, unix.S_IFDIR, path); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &cacheDir{fd: fd, path: path}, nil
}

func (c *cacheDir) close() { unix.Close(c.fd) }

// open opens and checks the file name of c, read-only; st is its status.
func (c *cacheDir) open(name string) (*os.File, *unix.Stat_t, error) {
	path := filepath.Join(c.path, name)
	fd, err := unix.Openat(c.fd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		if err == unix.ELOOP {
			return nil, nil, &CacheError{path, "a symbolic link"}
		}
		return nil, nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	st := new(unix.Stat_t)
	if err := unix.Fstat(fd, st); err != nil {
		unix.Close(fd)
		return nil, nil, &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	if err := checkCacheOwner(st, unix.S_IFREG, path); err != nil {
		unix.Close(fd)
		return nil, nil, err
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, nil, &os.PathError{Op: "fcntl", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), st, nil
}

// create creates a new temporary file in c (O_EXCL, mode), named from
// prefix.
func (c *cacheDir) create(prefix string, mode uint32) (*os.File, string, error) {
	var rnd [8]byte
	rand.Read(rnd[:])
	name := prefix + hex.EncodeToString(rnd[:])
	fd, err := unix.Openat(c.fd, name, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
	if err != nil {
		return nil, "", &os.PathError{Op: "create", Path: filepath.Join(c.path, name), Err: err}
	}
	return os.NewFile(uintptr(fd), filepath.Join(c.path, name)), name, nil
}

// maxCacheMiss bounds the read of cache_miss_s: a number of seconds.
const maxCacheMiss = 32
