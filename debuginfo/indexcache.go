package debuginfo

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/probekit/probekit/internal/cachedir"
)

// IndexCache is a per-user directory of line indexes (see LineIndex), one
// file per build ID: DIR/lines/HEX, DIR the probekit cache directory
// (DefaultIndexDir). The first symbolization of an
// object's DWARF writes its index there; the next ones read it and
// decode no DWARF.
//
// The directory DIR/lines is created 0700 and must be owned by the effective user
// and writable by no one else; an index file must be a regular file of
// the same owner, writable by no one else, and is opened without
// following a symbolic link, relative to the directory already checked.
// A directory or file that is not is refused (an *IndexCacheError naming
// it): the caller reads the DWARF instead. An index is written to a
// temporary file in the directory and renamed over the old one, so a
// reader sees a whole index or none, and runs at the same time do not
// mix theirs; one left half written by a crash fails its checksum and is
// rebuilt.
//
// The directory is bounded: after each Store, the index files used least
// recently (a Load marks a file used by its modification time) are
// removed until the rest fit in MaxBytes, and temporary files older than
// an hour (a crash's) go too.
type IndexCache struct {
	dir string
	// MaxBytes bounds the index files' total size
	// (DefaultIndexCacheBytes when 0).
	MaxBytes int64
}

// DefaultIndexCacheBytes is the cache's default bound: about 60 indexes
// of libc's size.
const DefaultIndexCacheBytes = 256 << 20

// maxIndexFile bounds the size of an index file read: libc's is 4.1 MB
// (its DWARF 8.6 MB decompressed), a program with 100 times libc's lines would
// still fit.
const maxIndexFile = 1 << 30

// IndexCacheError is a cache directory or index file refused: not the
// user's, writable by others, not a directory or regular file.
type IndexCacheError struct {
	Path string
	Msg  string
}

func (e *IndexCacheError) Error() string {
	return fmt.Sprintf("line index cache %s: %s (not used; the DWARF is read)", e.Path, e.Msg)
}

// DefaultIndexDir is the probekit cache directory when none is given:
// $PROBEKIT_CACHE_DIR, else systemd's $CACHE_DIRECTORY, else
// $XDG_CACHE_HOME/probekit, else $HOME/.cache/probekit when $HOME is the
// user's; "" when none can be named (internal/cachedir).
func DefaultIndexDir() string { return cachedir.Dir() }

// NewIndexCache returns the cache in dir/lines, dir the probekit cache
// directory (DefaultIndexDir when ""). The directories are created when
// an index is first stored.
func NewIndexCache(dir string) (*IndexCache, error) {
	if dir == "" {
		if dir = DefaultIndexDir(); dir == "" {
			return nil, errors.New("line index cache: " + cachedir.None + ": running without a disk cache (set PROBEKIT_CACHE_DIR to keep one)")
		}
	}
	return &IndexCache{dir: filepath.Join(dir, "lines")}, nil
}

// Dir is the directory of the index files (dir/lines).
func (c *IndexCache) Dir() string { return c.dir }

// IndexKey is what a line index was built from: an index is used only
// for the same key. The object is named by its build ID; the debug file
// (the object itself when it carries its DWARF) and the supplementary
// file (dwz's common file, if the debug file names one) by their
// identity: their build ID (for the supplementary file, the identity its
// link records) and their size; and the whole by Digest.
//
// A build ID is a claim of the file, not a proof: two files can carry
// one build ID and one size and hold other DWARF (a rebuilt package,
// or a file made to poison the cache). Digest, the SectionsDigest of
// the object, the debug file and the supplementary file, is what
// decides: an index stored for another digest is ErrIndexKey, and is
// rebuilt.
type IndexKey struct {
	BuildID   []byte
	DebugID   []byte
	DebugSize int64
	SupID     []byte
	SupSize   int64 // -1 without a supplementary file
	// Digest is the SectionsDigest of the files the index is built
	// from. An IndexKey without one is refused by Load and Store.
	Digest []byte
}

// bytes encodes k with the format version.
func (k *IndexKey) bytes() []byte {
	le := binary.LittleEndian
	b := le.AppendUint32(nil, LineIndexVersion)
	for _, id := range [][]byte{k.BuildID, k.DebugID, k.SupID, k.Digest} {
		b = le.AppendUint32(b, uint32(len(id)))
		b = append(b, id...)
	}
	b = le.AppendUint64(b, uint64(k.DebugSize))
	return le.AppendUint64(b, uint64(k.SupSize))
}

func (k *IndexKey) name() string { return hex.EncodeToString(k.BuildID) }

// openDir opens and checks the cache directory.
func (c *IndexCache) openDir() (int, error) {
	fd, err := unix.Open(c.dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if err == unix.ELOOP || err == unix.ENOTDIR {
			return -1, &IndexCacheError{c.dir, "not a directory (or a symbolic link)"}
		}
		return -1, &os.PathError{Op: "open", Path: c.dir, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, &os.PathError{Op: "fstat", Path: c.dir, Err: err}
	}
	if err := checkOwned(&st, unix.S_IFDIR, c.dir); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// checkOwned checks that st is of type kind, owned by the effective user
// and writable by neither its group nor others.
func checkOwned(st *unix.Stat_t, kind uint32, path string) error {
	switch {
	case st.Mode&unix.S_IFMT != kind && kind == unix.S_IFDIR:
		return &IndexCacheError{path, "not a directory"}
	case st.Mode&unix.S_IFMT != kind:
		return &IndexCacheError{path, "not a regular file"}
	case int(st.Uid) != os.Geteuid():
		return &IndexCacheError{path, fmt.Sprintf("owned by uid %d, not by the user (uid %d)", st.Uid, os.Geteuid())}
	case st.Mode&0o022 != 0:
		return &IndexCacheError{path, fmt.Sprintf("mode %#o: writable by others", st.Mode&0o7777)}
	}
	return nil
}

// Load returns the index stored for k. No index is an error wrapping
// os.ErrNotExist; one built from other DWARF, ErrIndexKey; a refused
// directory or file, an *IndexCacheError; a malformed one, an
// *IndexError (wrapped with the path): the caller rebuilds it.
func (c *IndexCache) Load(k *IndexKey) (*LineIndex, error) {
	if len(k.BuildID) == 0 {
		return nil, fmt.Errorf("line index: no build ID: %w", os.ErrNotExist)
	}
	if len(k.Digest) == 0 {
		return nil, fmt.Errorf("line index: no digest of the sections: %w", os.ErrNotExist)
	}
	dfd, err := c.openDir()
	if err != nil {
		return nil, err
	}
	defer unix.Close(dfd)
	name := k.name()
	path := filepath.Join(c.dir, name)
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		if err == unix.ELOOP {
			return nil, &IndexCacheError{path, "a symbolic link"}
		}
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	if err := checkOwned(&st, unix.S_IFREG, path); err != nil {
		return nil, err
	}
	if st.Size > maxIndexFile {
		return nil, fmt.Errorf("%s: %w", path, &IndexError{0, fmt.Sprintf("%d bytes, more than %d", st.Size, maxIndexFile)})
	}
	if st.Size == 0 {
		return nil, fmt.Errorf("%s: %w", path, &IndexError{0, "empty file"})
	}
	// Mapped, not read: reading 3.3 MB into fresh memory costs 10 to
	// 30 ms of page faults and copying here, mapping it populated
	// about 0.3 ms. The file is never written in place (Store renames
	// a new one over it), so the mapping does not change under the
	// lookups; only its owner could truncate it.
	m, err := unix.Mmap(fd, 0, int(st.Size), unix.PROT_READ, unix.MAP_PRIVATE|unix.MAP_POPULATE)
	if err != nil {
		return nil, &os.PathError{Op: "mmap", Path: path, Err: err}
	}
	x, err := ReadLineIndex(m, k.bytes())
	if err != nil {
		unix.Munmap(m)
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	// The strings Frames returns outlive x: they point into a copy of
	// the string bytes on the heap, not into the mapping, which goes
	// with x.
	x.strBytes = bytes.Clone(x.strBytes)
	runtime.AddCleanup(x, func(m []byte) { unix.Munmap(m) }, m)
	// Used now: the eviction keeps the files used last.
	unix.UtimesNanoAt(dfd, name, []unix.Timespec{{Nsec: unix.UTIME_OMIT}, {Nsec: unix.UTIME_NOW}}, unix.AT_SYMLINK_NOFOLLOW)
	return x, nil
}

// Store builds the index of l (and of syms, if given) for k, writes it to the cache (replacing
// the one there) and returns it. An index that cannot be written is
// still returned, with the error.
func (c *IndexCache) Store(k *IndexKey, l *Lines, syms *IndexSymbols) (*LineIndex, error) {
	if len(k.BuildID) == 0 {
		return nil, errors.New("line index: no build ID")
	}
	if len(k.Digest) == 0 {
		return nil, errors.New("line index: no digest of the sections")
	}
	b, err := l.AppendIndex(nil, k.bytes(), syms)
	if err != nil {
		return nil, err
	}
	x, err := ReadLineIndex(b, k.bytes())
	if err != nil {
		return nil, err // not written: a bug, the DWARF path still serves
	}
	return x, c.write(k.name(), b)
}

// write writes b to the file name of the directory: to a temporary file
// created there (O_EXCL, 0600), renamed over name.
func (c *IndexCache) write(name string, b []byte) error {
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return err
	}
	dfd, err := c.openDir()
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	var rnd [8]byte
	rand.Read(rnd[:])
	tmp := "." + name + ".tmp" + hex.EncodeToString(rnd[:])
	fd, err := unix.Openat(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return &os.PathError{Op: "create", Path: filepath.Join(c.dir, tmp), Err: err}
	}
	f := os.NewFile(uintptr(fd), filepath.Join(c.dir, tmp))
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		if err = unix.Renameat(dfd, tmp, dfd, name); err != nil {
			err = &os.LinkError{Op: "rename", Old: tmp, New: filepath.Join(c.dir, name), Err: err}
		}
	}
	if err != nil {
		unix.Unlinkat(dfd, tmp, 0)
		return err
	}
	c.evict(dfd, name)
	return nil
}

// evict removes, from the directory dfd, the index files used least
// recently until the others fit in MaxBytes (keep, the one just written,
// stays), and temporary files older than an hour. Only regular files of
// the user with an index's or a temporary file's name are touched.
func (c *IndexCache) evict(dfd int, keep string) {
	limit := c.MaxBytes
	if limit <= 0 {
		limit = DefaultIndexCacheBytes
	}
	dup, err := unix.Dup(dfd)
	if err != nil {
		return
	}
	d := os.NewFile(uintptr(dup), c.dir)
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return
	}
	type entry struct {
		name  string
		size  int64
		mtime int64
	}
	var files []entry
	var total int64
	now := time.Now().UnixNano()
	for _, n := range names {
		var st unix.Stat_t
		if unix.Fstatat(dfd, n, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || checkOwned(&st, unix.S_IFREG, n) != nil {
			continue
		}
		mtime := st.Mtim.Nano()
		switch {
		case strings.HasPrefix(n, ".") && strings.Contains(n, ".tmp"):
			if now-mtime > int64(time.Hour) {
				unix.Unlinkat(dfd, n, 0)
			}
		case isIndexName(n):
			total += st.Size
			if n != keep {
				files = append(files, entry{n, st.Size, mtime})
			}
		}
	}
	sort.Slice(files, func(i, j int) bool { return files[i].mtime < files[j].mtime })
	for _, f := range files {
		if total <= limit {
			break
		}
		if unix.Unlinkat(dfd, f.name, 0) == nil {
			total -= f.size
		}
	}
}

// isIndexName reports whether n is an index file's name: a build ID in
// lower-case hex (IndexKey.name).
func isIndexName(n string) bool {
	if n == "" || len(n)%2 != 0 {
		return false
	}
	for _, r := range n {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f') {
			return false
		}
	}
	return true
}
