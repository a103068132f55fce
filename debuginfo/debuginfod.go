package debuginfo

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/probekit/probekit/internal/safeelf"
	"golang.org/x/sys/unix"
)

// debuginfod client defaults and ceilings.
const (
	// DefaultTimeout bounds one download, connection to last byte. The
	// elfutils client's 90 s default drops only a server slower than
	// 100 KiB in that time; a tracer waiting for a probe to attach
	// should not wait that long.
	DefaultTimeout = 30 * time.Second
	// DefaultMaxSize bounds a downloaded debug file. libc's is 4 MiB;
	// the largest Debian debug files (browsers, LLVM) are a few hundred
	// MiB.
	DefaultMaxSize = 1 << 30
	// maxRedirects ends a redirect loop.
	maxRedirects = 8
	// defaultCacheMiss is how long a cached miss (an empty file) keeps
	// a build ID from being asked for again, in seconds: the elfutils
	// client's cache_miss_s default.
	defaultCacheMiss = 600
)

// ErrDebuginfod indicates a debuginfod server failed (not a plain 404): an HTTP
// error, a timeout, a body too large or not the debug file asked for.
var ErrDebuginfod = errors.New("debuginfod")

// debuginfodURLs returns the servers to ask, nil for none.
func (o *Options) debuginfodURLs() []string {
	if o.Offline {
		return nil
	}
	if o.DebuginfodURLs != nil {
		return o.DebuginfodURLs
	}
	return strings.Fields(os.Getenv("DEBUGINFOD_URLS"))
}

// cacheDir returns the debuginfod cache directory, as the elfutils client
// chooses it (debuginfod-client-config(7)), "" when none can be named.
func (o *Options) cacheDir() string {
	if o.CacheDir != "" {
		return o.CacheDir
	}
	if d := os.Getenv("DEBUGINFOD_CACHE_PATH"); d != "" {
		return d
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "debuginfod_client")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".cache", "debuginfod_client")
	}
	return ""
}

// debuginfod looks the build ID up in the cache, then asks each server
// in turn. The cache is the elfutils client's: CACHE/HEX/debuginfo holds
// a download; an empty CACHE/HEX/debuginfo is a miss, honoured for
// CACHE/cache_miss_s seconds (default 600) after its mtime. Only a 404
// from every server is cached as a miss: a timeout or a server error is
// asked again next time. A download is written to a temporary file in
// CACHE/HEX, checked (an ELF file with the object's build ID), and
// renamed into place: no reader sees a partial or foreign file.
func (fd *finder) debuginfod() *File {
	urls := fd.opts.debuginfodURLs()
	if len(urls) == 0 || len(fd.id) == 0 {
		return nil
	}
	cache := fd.opts.cacheDir()
	if cache == "" {
		fd.warn(fmt.Errorf("%w: no cache directory (set DEBUGINFOD_CACHE_PATH)", ErrDebuginfod))
		return nil
	}
	hexID := hex.EncodeToString(fd.id)
	// The directories are checked before anything in them is read or
	// written (CacheError, dcache.go).
	top, err := openCacheDir(nil, cache, false)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		fd.warn(fmt.Errorf("%s: %w", fd.path, err))
		return nil
	}
	var dir *cacheDir
	if top != nil {
		defer top.close()
		if dir, err = openCacheDir(top, hexID, false); err != nil && !errors.Is(err, os.ErrNotExist) {
			fd.warn(fmt.Errorf("%s: %w", fd.path, err))
			return nil
		}
	}
	if dir != nil {
		defer dir.close()
		f, st, err := dir.open("debuginfo")
		switch {
		case err == nil && st.Size > 0:
			if f := fd.tryCached(dir, f); f != nil {
				return f
			}
		case err == nil:
			f.Close()
			mtime := time.Unix(st.Mtim.Unix())
			if time.Since(mtime) <= cacheMiss(top) {
				return nil // a recent miss
			}
		case !errors.Is(err, os.ErrNotExist):
			fd.warn(fmt.Errorf("%s: %w", fd.path, err))
			return nil
		}
	}
	if top == nil {
		if top, err = openCacheDir(nil, cache, true); err != nil {
			fd.warn(fmt.Errorf("%s: %w: cache: %w", fd.path, ErrDebuginfod, err))
			return nil
		}
		defer top.close()
	}
	if dir == nil {
		if dir, err = openCacheDir(top, hexID, true); err != nil {
			fd.warn(fmt.Errorf("%s: %w: cache: %w", fd.path, ErrDebuginfod, err))
			return nil
		}
		defer dir.close()
	}
	var notFound int
	for _, u := range urls {
		err := fd.download(u, hexID, dir)
		if err == nil {
			f, _, err := dir.open("debuginfo")
			if err != nil {
				fd.warn(fmt.Errorf("%s: %w", fd.path, err))
				continue
			}
			if f := fd.tryCached(dir, f); f != nil {
				return f
			}
			continue
		}
		if errors.Is(err, os.ErrNotExist) {
			notFound++
			continue
		}
		fd.warn(fmt.Errorf("%s: %w", fd.path, err))
	}
	if notFound == len(urls) {
		// Cache the miss: an empty file, as the elfutils client
		// creates (O_CREAT|O_EXCL, mode 0666 less the umask).
		// An expired miss is renewed in place, never removed: a
		// download that another client renames there meanwhile must
		// survive.
		nfd, err := unix.Openat(dir.fd, "debuginfo", unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o666)
		switch {
		case err == nil:
			unix.Close(nfd)
		case err == unix.EEXIST:
			if f, st, err := dir.open("debuginfo"); err == nil {
				if st.Size == 0 {
					now := unix.NsecToTimeval(time.Now().UnixNano())
					unix.Futimes(int(f.Fd()), []unix.Timeval{now, now})
				}
				f.Close()
			}
		}
	}
	return nil
}

// tryCached checks f, the cached download in dir; one that does not
// check is removed.
func (fd *finder) tryCached(dir *cacheDir, f *os.File) *File {
	path := f.Name()
	if err := fd.check(f, candidate{path: path, source: SourceDebuginfod}); err != nil {
		f.Close()
		unix.Unlinkat(dir.fd, "debuginfo", 0)
		fd.warn(fmt.Errorf("%s: debuginfod cache %s: %w (removed)", fd.path, path, err))
		return nil
	}
	return &File{File: f, Path: path, Source: SourceDebuginfod, BuildID: fd.id, Warnings: fd.warns}
}

// cacheMiss reads CACHE/cache_miss_s, the seconds a miss is honoured:
// at most maxCacheMiss bytes of a checked regular file (anything else,
// the default).
func cacheMiss(top *cacheDir) time.Duration {
	s := defaultCacheMiss
	if f, _, err := top.open("cache_miss_s"); err == nil {
		var b [maxCacheMiss + 1]byte
		n, _ := io.ReadFull(f, b[:])
		f.Close()
		if n <= maxCacheMiss {
			if v, err := strconv.Atoi(strings.TrimSpace(string(b[:n]))); err == nil && v >= 0 {
				s = v
			}
		}
	}
	return time.Duration(s) * time.Second
}

// download fetches server/buildid/HEX/debuginfo into dir/debuginfo. A
// 404 is os.ErrNotExist; every other failure wraps ErrDebuginfod.
func (fd *finder) download(server, hexID string, dir *cacheDir) (err error) {
	timeout := fd.opts.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	maxSize := fd.opts.MaxSize
	if maxSize <= 0 {
		maxSize = DefaultMaxSize
	}
	url := strings.TrimRight(server, "/") + "/buildid/" + hexID + "/debuginfo"
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrDebuginfod, url, fmt.Sprintf(format, args...))
	}
	var ctx context.Context
	timedOut := func(err error) error {
		if ctx.Err() != nil {
			return fail("timed out after %v (Options.Timeout): %v", timeout, err)
		}
		return fail("%v", err)
	}
	client := &http.Client{
		Timeout: timeout,
		// No connection outlives the request: nothing is left open
		// after Find returns.
		Transport: &http.Transport{Proxy: http.ProxyFromEnvironment, DisableKeepAlives: true},
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= maxRedirects {
				return fmt.Errorf("stopped after %d redirects", len(via))
			}
			return nil
		},
	}
	defer client.CloseIdleConnections()
	var cancel context.CancelFunc
	ctx, cancel = context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fail("%v", err)
	}
	// The elfutils client's header for its size limit: a server may
	// answer 406 instead of sending a larger file.
	req.Header.Set("X-DEBUGINFOD-MAXSIZE", strconv.FormatInt(maxSize, 10))
	resp, err := client.Do(req)
	if err != nil {
		return timedOut(err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return fmt.Errorf("%s: %w", url, os.ErrNotExist)
	case resp.StatusCode != http.StatusOK:
		return fail("HTTP %s", resp.Status)
	case resp.ContentLength > maxSize:
		return fail("%d bytes, more than the %d allowed (Options.MaxSize)", resp.ContentLength, maxSize)
	}
	tmp, tmpName, err := dir.create(".debuginfo.tmp", 0o600)
	if err != nil {
		return fail("cache: %v", err)
	}
	defer func() {
		tmp.Close()
		if err != nil {
			unix.Unlinkat(dir.fd, tmpName, 0)
		}
	}()
	n, err := io.Copy(tmp, io.LimitReader(resp.Body, maxSize+1))
	switch {
	case err != nil:
		return timedOut(fmt.Errorf("after %d bytes: %w", n, err))
	case n > maxSize:
		return fail("more than the %d bytes allowed (Options.MaxSize)", maxSize)
	}
	// Checked before it enters the cache: an ELF file with the build ID
	// asked for.
	ef, err := safeelf.NewFile(io.NewSectionReader(tmp, 0, n))
	if err != nil {
		return fail("not an ELF file: %v", err)
	}
	id, err := ef.BuildID()
	if err != nil {
		return fail("%v", err)
	}
	if hex.EncodeToString(id) != hexID {
		return fail("%v: build ID %x", ErrMismatch, id)
	}
	if err := tmp.Chmod(0o400); err != nil {
		return fail("cache: %v", err)
	}
	if t, perr := http.ParseTime(resp.Header.Get("Last-Modified")); perr == nil {
		tv := unix.NsecToTimeval(t.UnixNano())
		unix.Futimes(int(tmp.Fd()), []unix.Timeval{tv, tv})
	}
	if err := unix.Renameat(dir.fd, tmpName, dir.fd, "debuginfo"); err != nil {
		return fail("cache: rename %s: %v", tmp.Name(), err)
	}
	return nil
}
