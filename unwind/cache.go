package unwind

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"

	"github.com/probekit/probekit/internal/safeelf"
	"github.com/probekit/probekit/procmaps"
	"golang.org/x/sys/unix"
)

// DefaultCacheBytes is the default ceiling of a Cache's tables: libc's
// table is about 1 MiB, so a few hundred objects.
const DefaultCacheBytes = 256 << 20

// DefaultCacheEntries is the default ceiling of a Cache's entries,
// tables and the errors of files without one (a Go program, a file
// that is not ELF) alike: the errors take no table memory, so
// MaxBytes alone would keep every one. The 110 processes of a Debian 12
// test machine map 66 distinct executable files.
const DefaultCacheEntries = 4096

// Cache holds the tables of the objects it has loaded, by file
// identity, for every process that maps them. Safe for concurrent use.
//
// An entry is used again only for the same file: besides device and
// inode (which a new file can reuse once the old one is deleted), its
// size, modification and change times must match those of the file
// opened now, else it is read again. A failure to open or stat the
// object (a process gone, a file unreadable for now) is not kept: the
// next process that maps it tries again. What is kept of a file that
// opened, a table or the error its contents gave, holds until the
// file changes; an error of the read itself (EIO, a file system that
// failed for now: an error with an errno) is not kept either.
//
// The tables it holds are bounded by MaxBytes (DefaultCacheBytes when
// 0) and the entries by MaxEntries (DefaultCacheEntries when 0): past
// either, the least recently used are dropped (the ProcessObjects that
// hold them keep them).
type Cache struct {
	// MaxBytes bounds the memory of the tables kept; set it before
	// first use.
	MaxBytes int
	// MaxEntries bounds the files kept, with a table or an error; set
	// it before first use.
	MaxEntries int

	mu     sync.Mutex
	tables map[procmaps.FileID]*cached
	bytes  int
	tick   uint64
}

type cached struct {
	t    *Table
	segs safeelf.Segments
	err  error
	// stamp is the file's identity beyond device and inode.
	stamp fileStamp
	used  uint64 // the Cache's tick at its last use
}

// fileStamp is what tells a file from another with the same device and
// inode, or from itself rewritten in place.
type fileStamp struct {
	dev, ino     uint64
	size         int64
	mtime, ctime unix.Timespec
}

func stampOf(f *os.File) (fileStamp, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fileStamp{}, &os.PathError{Op: "fstat", Path: f.Name(), Err: err}
	}
	return fileStamp{dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim, ctime: st.Ctim}, nil
}

// NewCache returns an empty cache.
func NewCache() *Cache { return &Cache{tables: map[procmaps.FileID]*cached{}} }

// Size is the memory the cached tables hold, in bytes.
func (c *Cache) Size() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes
}

// Len is the number of files the cache holds (tables or errors).
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.tables)
}

// openObject opens an object of a process (a variable for tests).
var openObject = func(p *procmaps.Process, ob *procmaps.Object) (*os.File, error) { return p.OpenObject(ob) }

func (c *Cache) load(p *procmaps.Process, ob *procmaps.Object) cached {
	f, err := openObject(p, ob)
	if err != nil {
		return cached{err: err} // not kept: it may open next time
	}
	defer f.Close()
	return c.loadFile(ob.ID(), ob.Path, f)
}

// loadFile returns the entry of f, opened for the object of identity id,
// from the cache when its stamp matches, else read and kept.
func (c *Cache) loadFile(id procmaps.FileID, path string, f *os.File) cached {
	stamp, err := stampOf(f)
	if err != nil {
		return cached{err: err}
	}
	c.mu.Lock()
	if c.tables == nil {
		c.tables = map[procmaps.FileID]*cached{}
	}
	if e, ok := c.tables[id]; ok {
		if e.stamp == stamp {
			c.tick++
			e.used = c.tick
			v := *e
			c.mu.Unlock()
			return v
		}
		c.drop(id, e) // another file now, or this one rewritten
	}
	c.mu.Unlock()
	e := readFile(path, readerOf(f))
	e.stamp = stamp
	if e.err != nil && transient(e.err) {
		return e // not kept: the next read may succeed
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.tables[id]; ok {
		c.drop(id, old) // read meanwhile by another caller
	}
	c.tick++
	e.used = c.tick
	c.tables[id] = &e
	c.bytes += e.size()
	c.evict(id)
	return e
}

func (e *cached) size() int {
	if e.t == nil {
		return 0
	}
	return e.t.Size
}

// drop removes the entry id; c.mu is held.
func (c *Cache) drop(id procmaps.FileID, e *cached) {
	delete(c.tables, id)
	c.bytes -= e.size()
}

// transient reports whether err is the read's failure (it carries an
// errno: EIO, EINTR, EAGAIN) rather than a fact of the file's contents.
func transient(err error) bool {
	var errno syscall.Errno
	return errors.As(err, &errno)
}

// readerOf is what a file is read through (a variable for tests).
var readerOf = func(f *os.File) io.ReaderAt { return f }

// evict drops the least recently used entries, other than keep, until
// the tables fit MaxBytes and the entries MaxEntries; c.mu is held. A
// scan per entry dropped: the cache holds hundreds of entries, and
// evicts rarely.
func (c *Cache) evict(keep procmaps.FileID) {
	limit, entries := c.MaxBytes, c.MaxEntries
	if limit <= 0 {
		limit = DefaultCacheBytes
	}
	if entries <= 0 {
		entries = DefaultCacheEntries
	}
	for (c.bytes > limit || len(c.tables) > entries) && len(c.tables) > 1 {
		var oldest procmaps.FileID
		var oe *cached
		for id, e := range c.tables {
			if id != keep && (oe == nil || e.used < oe.used) {
				oldest, oe = id, e
			}
		}
		if oe == nil {
			return
		}
		c.drop(oldest, oe)
	}
}

// readFile reads the table of f (the object at path).
func readFile(path string, f io.ReaderAt) cached {
	ef, err := safeelf.NewFile(f)
	if err != nil {
		return cached{err: fmt.Errorf("%s: %w", path, err)}
	}
	e := cached{segs: ef.Loads()}
	if e.t, err = Load(ef); err != nil {
		e.err = fmt.Errorf("%s: %w", path, err)
	}
	return e
}
