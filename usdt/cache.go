package usdt

import (
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/probekit/probekit/procmaps"
)

// fileID identifies a file's content without reading it: the inode it
// lives in, and the size and modification time that change when it is
// rewritten in place. A binary replaced by rename has a new inode; one
// rewritten in place keeps the inode and changes size or mtime.
type fileID struct {
	dev, ino uint64
	size     int64
	mtime    time.Time
}

type inode struct{ dev, ino uint64 }

// cacheEntry is one parsed file; once guards its parse so that callers
// racing on a new file parse it once.
type cacheEntry struct {
	id   fileID
	once sync.Once
	file *File
	err  error
}

// maxCacheEntries bounds a Cache: a long-running tracer attaching by PID
// parses every object of every process it meets (a Debian desktop process
// maps 100-300 files, most without notes), and a cache that only grows
// would keep all of them. Past the bound an arbitrary entry goes; it is
// parsed again if it is needed again.
const maxCacheEntries = 4096

// Cache holds the parsed probes of files by identity (device and inode,
// checked against size and mtime), so that two paths to one file (a
// symlink, /proc/PID/root/..., a bind mount) share one entry and a
// replaced binary is read again. It keeps one entry per inode, at most
// 4096 entries, and is safe for concurrent use. The zero value is not
// ready: use NewCache.
type Cache struct {
	mu      sync.Mutex
	entries map[inode]*cacheEntry
	max     int
}

// NewCache returns an empty Cache.
func NewCache() *Cache {
	return &Cache{entries: make(map[inode]*cacheEntry), max: maxCacheEntries}
}

// Open returns the probes of the file at path, parsing it unless a file
// with the same identity was parsed before. The identity is taken from the
// open file descriptor that is then parsed, so a file replaced between the
// check and the parse cannot be cached under the old identity.
//
// The returned File shares its Probes with every caller of the same file:
// treat it as read-only. Its Path is the path given here.
//
// Only a regular file is opened, without blocking: a FIFO, socket,
// device or directory fails at once (procmaps.ErrNotRegular).
func (c *Cache) Open(path string) (*File, error) {
	fd, err := procmaps.OpenFile(path)
	if err != nil {
		return nil, fmt.Errorf("usdt: %w", err)
	}
	defer fd.Close()
	return c.OpenFile(fd, path)
}

// OpenFile is Open for a file already open (procmaps.Target.File): it is
// parsed from fd, and name is what errors and File.Path say.
func (c *Cache) OpenFile(fd *os.File, name string) (*File, error) {
	path := name
	st, err := fd.Stat()
	if err != nil {
		return nil, fmt.Errorf("usdt: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("usdt: %s: %w", name, procmaps.ErrNotRegular)
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return nil, fmt.Errorf("usdt: %s: no inode information", path)
	}
	id := fileID{dev: uint64(sys.Dev), ino: uint64(sys.Ino), size: st.Size(), mtime: st.ModTime()}
	key := inode{id.dev, id.ino}

	c.mu.Lock()
	e := c.entries[key]
	if e == nil || e.id != id {
		if e == nil && len(c.entries) >= c.max {
			for k := range c.entries { // map order: an arbitrary victim
				delete(c.entries, k)
				break
			}
		}
		e = &cacheEntry{id: id}
		c.entries[key] = e
	}
	c.mu.Unlock()

	e.once.Do(func() {
		e.file, e.err = parse(fd)
		if e.err != nil {
			e.err = fmt.Errorf("usdt: %s: %w", path, e.err)
		}
	})
	if e.err != nil {
		return nil, e.err
	}
	f := *e.file
	f.Path = path
	return &f, nil
}

// Len returns the number of files in the cache.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}
