package debuginfo

import (
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/probekit/probekit/internal/safeelf"
	"github.com/probekit/probekit/procmaps"
	"golang.org/x/sys/unix"
)

// Errors.
var (
	// ErrNotFound indicates no debug file was found for the object (wrapped with
	// the warnings about candidates that were refused).
	ErrNotFound = errors.New("no debug information found")
	// ErrMismatch indicates a candidate debug file belongs to another build (its
	// build ID differs, or its CRC-32 is not the one the debuglink
	// records). Warnings wrap it.
	ErrMismatch = errors.New("debug file does not match the object")
	// ErrBadLink indicates a .gnu_debuglink name that is not a base name ("/",
	// "..", "."), which would lead out of the debug directories.
	ErrBadLink = errors.New("debuglink name is not a base name")
	// ErrTooLarge indicates a candidate debug file larger than
	// Options.MaxSize: its CRC-32 is not computed, and it is not used.
	ErrTooLarge = errors.New("debug file too large")
	// ErrNotTrusted indicates a debuglink candidate beside the object,
	// opened on the host, that is a symbolic link, is writable by
	// others, or is owned by neither root, the user, nor the object's
	// owner.
	ErrNotTrusted = errors.New("debug file not trusted")
)

// DefaultDebugDir is the global debug directory of gdb, elfutils and
// Debian's -dbg packages.
const DefaultDebugDir = "/usr/lib/debug"

// Options tune Find. A nil *Options, and the zero value of each field,
// mean the defaults.
type Options struct {
	// Process is the process the object belongs to: paths are then
	// opened inside its root first (procmaps.Process's OpenOwned), then
	// on the host.
	Process *procmaps.Process
	// DebugDirs are the global debug directories searched by build ID
	// and by debuglink; default DefaultDebugDir.
	DebugDirs []string
	// DebuginfodURLs are the debuginfod servers, tried in order; default
	// the space-separated $DEBUGINFOD_URLS. With neither, nothing is
	// fetched.
	DebuginfodURLs []string
	// Offline turns debuginfod off even when DebuginfodURLs or
	// $DEBUGINFOD_URLS name servers: only local files are searched.
	Offline bool
	// CacheDir is the debuginfod cache; default $DEBUGINFOD_CACHE_PATH,
	// else $XDG_CACHE_HOME/debuginfod_client, else
	// $HOME/.cache/debuginfod_client (the elfutils client's choice).
	CacheDir string
	// Timeout bounds one debuginfod download from connect to last byte;
	// default DefaultTimeout.
	Timeout time.Duration
	// MaxSize bounds a downloaded debug file and a debug file whose
	// CRC-32 a debuglink asks for (the whole file is read for it);
	// default DefaultMaxSize.
	MaxSize int64
	// Warn, when set, is called with each candidate refused (a build ID
	// or CRC mismatch, a bad debuglink, a failed download); the same
	// warnings are in File.Warnings.
	Warn func(error)
}

// Source says where a debug file was found.
type Source uint8

const (
	// SourceSelf: the object itself carries the debug information.
	SourceSelf Source = iota + 1
	// SourceBuildID: DIR/.build-id/NN/REST.debug.
	SourceBuildID
	// SourceDebugLink: the file .gnu_debuglink names.
	SourceDebugLink
	// SourceDebuginfod: a debuginfod server, or its cache.
	SourceDebuginfod
	// SourceSup: the supplementary file a debug file's
	// .gnu_debugaltlink or .debug_sup names (FindSup).
	SourceSup
)

func (s Source) String() string {
	switch s {
	case SourceSelf:
		return "self"
	case SourceBuildID:
		return "build-id"
	case SourceDebugLink:
		return "debuglink"
	case SourceDebuginfod:
		return "debuginfod"
	case SourceSup:
		return "supplementary"
	}
	return fmt.Sprintf("Source(%d)", uint8(s))
}

// File is an open debug file. Its section addresses are the object's:
// it comes from the same build. Close releases it.
type File struct {
	// File is the open debug file (for SourceSelf, a duplicate of the
	// object's descriptor).
	*os.File
	// Path is where it was found: a host path, or for a file inside a
	// process's root that path as the process sees it.
	Path string
	// InRoot is set when the file was opened inside Options.Process's
	// root.
	InRoot bool
	// Source says how it was found.
	Source Source
	// BuildID is the object's build ID (nil when it has none).
	BuildID []byte
	// Warnings are the candidates refused before this one was found.
	Warnings []error
}

// finder is one Find call.
type finder struct {
	opts  Options
	obj   *os.File
	path  string
	id    []byte
	warns []error
}

// Find returns the debug file of the ELF object obj, whose path is path
// (as Options.Process sees it, when set; used for the debuglink
// directories). The error wraps ErrNotFound when there is none, joined
// with the warnings about refused candidates.
func Find(obj *os.File, path string, opts *Options) (*File, error) {
	fd := &finder{obj: obj, path: path}
	if opts != nil {
		fd.opts = *opts
	}
	if len(fd.opts.DebugDirs) == 0 {
		fd.opts.DebugDirs = []string{DefaultDebugDir}
	}
	ef, err := safeelf.NewFile(obj)
	if err != nil {
		return nil, fmt.Errorf("debuginfo: %s: %w", path, err)
	}
	if fd.id, err = ef.BuildID(); err != nil {
		fd.warn(fmt.Errorf("%s: build ID unreadable: %w", path, err))
	}
	if hasDWARF(ef) {
		return fd.self()
	}
	if f := fd.local(ef); f != nil {
		return f, nil
	}
	if f := fd.debuginfod(); f != nil {
		return f, nil
	}
	if ef.SectionByType(elf.SHT_SYMTAB) != nil {
		return fd.self()
	}
	err = fmt.Errorf("debuginfo: %s: %w", path, ErrNotFound)
	if len(fd.warns) > 0 {
		err = errors.Join(append([]error{err}, fd.warns...)...)
	}
	return nil, err
}

// hasDWARF reports whether f carries DWARF with contents (a stripped
// file keeps none; a debug file made by objcopy --only-keep-debug keeps
// .debug_* and makes code SHT_NOBITS).
func hasDWARF(f *safeelf.File) bool {
	for _, name := range []string{".debug_info", ".zdebug_info"} {
		if s := f.Section(name); s != nil && s.Type != elf.SHT_NOBITS && s.Size > 0 {
			return true
		}
	}
	return false
}

func (fd *finder) warn(err error) {
	fd.warns = append(fd.warns, err)
	if fd.opts.Warn != nil {
		fd.opts.Warn(err)
	}
}

func (fd *finder) self() (*File, error) {
	dup, err := dupFile(fd.obj)
	if err != nil {
		return nil, fmt.Errorf("debuginfo: %s: %w", fd.path, err)
	}
	return &File{File: dup, Path: fd.path, InRoot: fd.opts.Process != nil, Source: SourceSelf, BuildID: fd.id, Warnings: fd.warns}, nil
}

// local searches the build-ID and debuglink paths, inside the process's
// root first, then on the host.
func (fd *finder) local(ef *safeelf.File) *File {
	var cands []candidate
	if len(fd.id) > 1 {
		hexID := hex.EncodeToString(fd.id)
		for _, dir := range fd.opts.DebugDirs {
			cands = append(cands, candidate{path: filepath.Join(dir, ".build-id", hexID[:2], hexID[2:]+".debug"), source: SourceBuildID})
		}
	}
	name, crc, ok, err := ef.DebugLink()
	switch {
	case err != nil:
		fd.warn(fmt.Errorf("%s: %w", fd.path, err))
	case ok && !isBaseName(name):
		fd.warn(fmt.Errorf("%s: .gnu_debuglink %q: %w", fd.path, name, ErrBadLink))
	case ok:
		dir := filepath.Dir(fd.path)
		if !filepath.IsAbs(dir) {
			if abs, err := filepath.Abs(dir); err == nil {
				dir = abs
			}
		}
		link := []string{filepath.Join(dir, name), filepath.Join(dir, ".debug", name)}
		for _, d := range fd.opts.DebugDirs {
			link = append(link, filepath.Join(d, dir, name))
		}
		for i, p := range link {
			// The two beside the object are in a directory its
			// owner chose, not in a debug directory.
			cands = append(cands, candidate{path: p, source: SourceDebugLink, crc: crc, checkCRC: true, beside: i < 2})
		}
	}
	if fd.opts.Process != nil {
		for _, c := range cands {
			if f := fd.try(c, true); f != nil {
				return f
			}
		}
	}
	for _, c := range cands {
		if f := fd.try(c, false); f != nil {
			return f
		}
	}
	return nil
}

// isBaseName reports whether a debuglink name names a file in the
// directory it is joined to: bfd writes only base names (lbasename), and
// "/" or ".." would leave the trusted directories.
func isBaseName(name string) bool {
	return name != "" && name != "." && name != ".." && !strings.ContainsRune(name, '/') && !strings.ContainsRune(name, 0)
}

// candidate is one path where the debug file may be.
type candidate struct {
	path     string
	source   Source
	crc      uint32
	checkCRC bool
	// beside is set for a debuglink candidate in the object's
	// directory: on the host it is opened with openBeside.
	beside bool
	sup    *SupLink // for FindSup: the identity it must have
}

// try opens c and checks it; nil when it is absent or refused (refusals
// are warnings).
func (fd *finder) try(c candidate, inRoot bool) *File {
	var f *os.File
	var err error
	switch {
	case inRoot:
		f, err = fd.opts.Process.OpenOwned(c.path)
	case c.beside:
		f, err = openBeside(c.path, fd.obj)
	default:
		f, err = procmaps.OpenFile(c.path)
	}
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			fd.warn(fmt.Errorf("%s: debug file %s: %w", fd.path, c.path, err))
		}
		return nil
	}
	if sameFile(f, fd.obj) {
		f.Close() // the debuglink names the object itself
		return nil
	}
	where := c.path
	if inRoot {
		where = fmt.Sprintf("%s (in pid %d's root)", c.path, fd.opts.Process.PID)
	}
	if err := fd.check(f, c); err != nil {
		f.Close()
		fd.warn(fmt.Errorf("%s: debug file %s: %w", fd.path, where, err))
		return nil
	}
	return &File{File: f, Path: c.path, InRoot: inRoot, Source: c.source, BuildID: fd.id, Warnings: fd.warns}
}

// check verifies that f belongs to the object: the same build ID when
// both have one (a file without any is accepted only through a CRC-checked
// debuglink), the debuglink's CRC when it came from one, and debug
// information to offer.
func (fd *finder) check(f *os.File, c candidate) error {
	ef, err := safeelf.NewFile(f)
	if err != nil {
		return err
	}
	if c.sup != nil {
		return checkSup(ef, c.sup)
	}
	id, err := ef.BuildID()
	if err != nil {
		return err
	}
	switch {
	case fd.id != nil && id != nil && !equal(id, fd.id):
		return fmt.Errorf("%w: build ID %x, the object's is %x", ErrMismatch, id, fd.id)
	case fd.id != nil && id == nil && !c.checkCRC:
		return fmt.Errorf("%w: no build ID, the object's is %x", ErrMismatch, fd.id)
	}
	if c.checkCRC {
		got, err := fileCRC(f, fd.opts.maxSize())
		if err != nil {
			return err
		}
		if got != c.crc {
			return fmt.Errorf("%w: CRC-32 %#08x, the debuglink records %#08x", ErrMismatch, got, c.crc)
		}
	}
	if !hasDWARF(ef) && ef.SectionByType(elf.SHT_SYMTAB) == nil {
		return fmt.Errorf("%w: neither DWARF nor a symbol table", ErrMismatch)
	}
	return nil
}

// fileCRC is the CRC-32 (IEEE, the zlib polynomial, seed 0) of the whole
// file, the checksum a .gnu_debuglink records (gdb manual). A file of
// more than limit bytes is ErrTooLarge, and is not read; one that grows
// while read is read up to limit only, and fails the comparison.
func fileCRC(f *os.File, limit int64) (uint32, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	if st.Size() > limit {
		return 0, fmt.Errorf("%w: %d bytes, more than the %d read for a debuglink's CRC-32 (Options.MaxSize)", ErrTooLarge, st.Size(), limit)
	}
	h := crc32.NewIEEE()
	if _, err := io.Copy(h, io.NewSectionReader(f, 0, limit)); err != nil {
		return 0, err
	}
	return h.Sum32(), nil
}

// maxSize is MaxSize, or DefaultMaxSize when not set.
func (o *Options) maxSize() int64 {
	if o.MaxSize > 0 {
		return o.MaxSize
	}
	return DefaultMaxSize
}

// openBeside opens, on the host, a debuglink candidate in the directory
// of the object obj: the final component is not followed (O_NOFOLLOW),
// the open does not block (O_NONBLOCK: a FIFO is refused, not waited
// on), and the file must be a regular file owned by root, by the user
// or by obj's owner (who could have written obj itself), not writable
// by others, and, when root's beside an object that is not, with a
// single link. Else ErrNotTrusted.
func openBeside(path string, obj *os.File) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err == unix.ELOOP {
		return nil, fmt.Errorf("%w: %s is a symbolic link, not followed", ErrNotTrusted, path)
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	var st, ost unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	objUID := -1
	if obj != nil && unix.Fstat(int(obj.Fd()), &ost) == nil {
		objUID = int(ost.Uid)
	}
	var why string
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		why = "not a regular file"
	case st.Uid != 0 && int(st.Uid) != os.Geteuid() && int(st.Uid) != objUID:
		why = fmt.Sprintf("owned by uid %d, neither root, the user, nor the object's owner", st.Uid)
	case st.Mode&0o002 != 0:
		why = fmt.Sprintf("mode %#o: writable by others", st.Mode&0o7777)
	case st.Uid == 0 && objUID != 0 && st.Nlink > 1:
		// With fs.protected_hardlinks=0 the object's owner can link a
		// root-only file beside it; the link keeps root's ownership.
		why = fmt.Sprintf("root's, with %d links, beside an object of uid %d", st.Nlink, objUID)
	}
	if why != "" {
		unix.Close(fd)
		return nil, fmt.Errorf("%w: %s: %s", ErrNotTrusted, path, why)
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "fcntl", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

func equal(a, b []byte) bool { return string(a) == string(b) }
