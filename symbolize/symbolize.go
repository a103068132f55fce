package symbolize

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/probekit/probekit/debuginfo"
	"github.com/probekit/probekit/procmaps"
)

// DefaultMaxTableBytes is the default ceiling of Options.MaxTableBytes:
// the estimated memory of the symbol tables a Symbolizer keeps. libjvm.so
// (48,000 functions) is estimated at 8 MiB, node 20 (86,000) at 23 MiB.
const DefaultMaxTableBytes = 512 << 20

// Options configure a Symbolizer. The zero value is valid.
type Options struct {
	// Demangle turns C++ (Itanium ABI) and Rust names into source
	// form: _ZN2os5sleepEl becomes os::sleep(long).
	Demangle bool
	// MaxTableBytes bounds the estimated memory of the cached tables
	// (the symbol and string tables read, .gopclntab, and an index
	// entry per function); 0 means DefaultMaxTableBytes. When a new
	// table would exceed it, the least recently used tables are dropped
	// (CLOCK, an approximation of LRU). A single table larger than the
	// ceiling is still read. A Process or File keeps the tables it used:
	// a dropped table it uses again is put back (not read again).
	MaxTableBytes int64
	// DebugInfo tells where debug files are looked for
	// (debuginfo.Find): the build-ID and debuglink directories, and
	// debuginfod, which is used only when DebugInfo.DebuginfodURLs or
	// $DEBUGINFOD_URLS names a server and DebugInfo.Offline is not set.
	// Its Process is set by Symbolizer.Process. The debug file gives a
	// stripped file's static functions (its .symtab) and the DWARF source
	// lines and inlined calls of C, C++ and Rust.
	DebugInfo debuginfo.Options
	// NoDebugInfo reads only the files' own symbol tables: no debug
	// file is looked for, no DWARF read (Go's pclntab still gives
	// lines).
	NoDebugInfo bool
	// IndexDir is the directory of the line indexes: what DWARF gives
	// every address of an object (function, file, line, inline chain),
	// kept by build ID so that the next Symbolizer, in this process or
	// another, reads it instead of decompressing and decoding the DWARF
	// (debuginfo.IndexCache). Default debuginfo.DefaultIndexDir():
	// $PROBEKIT_CACHE_DIR, else $XDG_CACHE_HOME/probekit, else
	// ~/.cache/probekit. An object without a build ID is not indexed.
	// (Options.DebugInfo.CacheDir is debuginfod's download cache.)
	IndexDir string
	// NoIndex reads and writes no line index: every Symbolizer reads
	// the DWARF.
	NoIndex bool
}

// Symbolizer turns addresses into functions. Tables are read once per
// file identity (device and inode) and shared by every Process and File
// of the Symbolizer, so two containers that map one library share its
// table while two files with one path do not. A Symbolizer is safe for
// concurrent use.
type Symbolizer struct {
	demangle bool
	debug    *debuginfo.Options    // nil with NoDebugInfo
	index    *debuginfo.IndexCache // nil with NoIndex or NoDebugInfo
	cache    cache
	// vdso is the last vDSO image read and its table (every process on
	// one kernel maps the same image).
	vdsoMu  sync.Mutex
	vdsoImg []byte
	vdsoTab *table
}

// vdsoTable returns the table of the vDSO image img.
func (s *Symbolizer) vdsoTable(img []byte) *table {
	s.vdsoMu.Lock()
	defer s.vdsoMu.Unlock()
	if s.vdsoTab == nil || !bytes.Equal(s.vdsoImg, img) {
		s.vdsoImg, s.vdsoTab = img, loadTable(procmaps.FileID{}, bytes.NewReader(img), nil, s.cache.max)
	}
	return s.vdsoTab
}

// New returns a Symbolizer; opts may be nil.
func New(opts *Options) *Symbolizer {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.MaxTableBytes <= 0 {
		o.MaxTableBytes = DefaultMaxTableBytes
	}
	s := &Symbolizer{demangle: o.Demangle, cache: cache{max: o.MaxTableBytes}}
	if !o.NoDebugInfo {
		d := o.DebugInfo
		s.debug = &d
		if !o.NoIndex {
			c, err := debuginfo.NewIndexCache(o.IndexDir)
			if err != nil && d.Warn != nil {
				d.Warn(err)
			}
			s.index = c
		}
	}
	return s
}

// source returns where the table of the object f (at path, as proc sees
// it; proc nil for a host file) looks for debug information.
func (s *Symbolizer) source(f *os.File, path string, proc *procmaps.Process) *debugSource {
	if s.debug == nil {
		return nil
	}
	src := &debugSource{obj: f, path: path, opts: *s.debug, index: s.index}
	src.opts.Process = proc
	return src
}

// Frame is one symbolized address, or one frame of its inline chain.
//
// Where the compiler inlined calls, an address has a frame per function
// of the chain, innermost first, as addr2line -f -i prints them: each but
// the last has Inlined set and is the function inlined into the next
// frame's; the last is the function that holds the code. All frames of
// one address have its Address and Object.
type Frame struct {
	// Address is the address as given.
	Address uint64
	// Object is the file holding the address, its path as the process
	// maps it (for a File, the path given); for memory that no file
	// backs, the maps pseudo name ("[vdso]", "[heap]", "[anon:NAME]")
	// or "[anon]", and for JIT code named by a perf map that map's
	// path as the process sees it (/tmp/perf-PID.map). "" when no
	// mapping holds the address.
	Object string
	// Function is the name of the function holding the address (for an
	// inlined frame, of the inlined function), "" when unknown: from
	// DWARF when it describes the address (as addr2line names it), else
	// from the symbol table (.symtab, .dynsym, the debug file's .symtab,
	// .gopclntab). Offset is the address's offset from the start of the
	// function (of the function's address range holding it, for a
	// function split in parts); 0 in inlined frames.
	Function string
	Offset   uint64
	// File and Line are the source position: of the address in the
	// innermost frame, of the inlined call in each outer one (the call
	// site, DW_AT_call_file and DW_AT_call_line). From DWARF for C, C++
	// and Rust, from .gopclntab for Go; "" and 0 when unknown.
	File string
	Line int
	// Inlined is set when the function was inlined into the next
	// frame's (see Frame).
	Inlined bool
	// Runtime is set for an interpreted frame that a stack holds among
	// its native ones (MergeInterp): "python". It has no Address,
	// Object or Offset; Function is the function's qualified name (or
	// "<python: unreadable: WHY>"), File and Line the line executing.
	Runtime string
}

// String formats f as one line: address, function+offset (for an inlined
// frame "function (inlined)"), object and file:line when known; for an
// interpreted frame (Runtime set) function, file:line and "[RUNTIME]".
func (f Frame) String() string {
	b, _ := f.AppendText(make([]byte, 0, 96))
	return string(b)
}

// AppendText appends the line String gives to b (encoding.TextAppender);
// the error is always nil.
func (f Frame) AppendText(b []byte) ([]byte, error) {
	if f.Runtime != "" {
		// An interpreted frame: function file:line [runtime].
		b = append(b, f.Function...)
		if f.File != "" {
			b = append(b, ' ')
			b = append(b, f.File...)
			if f.Line > 0 {
				b = append(b, ':')
				b = strconv.AppendInt(b, int64(f.Line), 10)
			}
		}
		b = append(b, " ["...)
		b = append(b, f.Runtime...)
		return append(b, ']'), nil
	}
	b = append(b, "0x"...)
	b = strconv.AppendUint(b, f.Address, 16)
	b = append(b, ' ')
	switch {
	case f.Function == "" && f.Inlined:
		b = append(b, "?? (inlined)"...)
	case f.Function == "":
		b = append(b, "??"...)
	case f.Inlined:
		b = append(b, f.Function...)
		b = append(b, " (inlined)"...)
	default:
		b = append(b, f.Function...)
		b = append(b, "+0x"...)
		b = strconv.AppendUint(b, f.Offset, 16)
	}
	if f.Object != "" {
		b = append(b, " ("...)
		b = append(b, f.Object...)
		b = append(b, ')')
	}
	if f.Line > 0 {
		b = append(b, ' ')
		b = append(b, f.File...)
		b = append(b, ':')
		b = strconv.AppendInt(b, int64(f.Line), 10)
	}
	return b, nil
}

// File is an ELF file whose link-time addresses (symbol values, what nm
// and addr2line take) are symbolized.
type File struct {
	s    *Symbolizer
	path string
	t    atomic.Pointer[table]
}

// File reads the functions of the ELF file at path (a host path). The
// file is opened as a regular file without blocking, read and closed.
func (s *Symbolizer) File(path string) (*File, error) {
	f, err := procmaps.OpenFile(path)
	if err != nil {
		return nil, err
	}
	var st os.FileInfo
	if st, err = f.Stat(); err != nil {
		f.Close()
		return nil, err
	}
	id := fileID(st)
	t, err := s.cache.get(id, func() (*os.File, *debugSource, error) { return f, s.source(f, path, nil), nil })
	if t == nil || !t.readable() || err != nil {
		f.Close() // no-op when the table read it
		if err == nil {
			err = t.err
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	f.Close()
	file := &File{s: s, path: path}
	file.t.Store(t)
	return file, nil
}

// Symbolize returns the frames of each link-time address, in order: one
// per address, or its inline chain (see Frame).
func (f *File) Symbolize(addrs []uint64) []Frame {
	frames := make([]Frame, 0, len(addrs))
	for _, a := range addrs {
		frames = f.Frames(frames, a)
	}
	return frames
}

// Frame symbolizes one link-time address: the first frame of Frames (the
// innermost function, inlined or not).
func (f *File) Frame(addr uint64) Frame {
	var buf [8]Frame
	return f.Frames(buf[:0], addr)[0]
}

// Frames appends the frames of the link-time address addr to dst (one,
// or its inline chain, innermost first) and returns it; with room in dst
// it allocates nothing.
func (f *File) Frames(dst []Frame, addr uint64) []Frame {
	fr := Frame{Address: addr, Object: f.path}
	t := f.t.Load()
	if t.evicted.Load() {
		t = f.s.cache.adopt(t)
		f.t.Store(t)
	} else if !t.ref.Load() {
		t.ref.Store(true)
	}
	return t.frames(dst, fr, addr, f.s.demangle)
}

// locateBatch is how many addresses FramesOf looks up at once: what the
// memory its lookups touch for them (a few cache lines each) leaves in
// a core's cache.
const locateBatch = 256

// FramesOf appends the frames of each of the link-time addresses addrs to
// dst, in their order, and returns it: Frames for each, but from a line
// index (the cache's) the lookups of a batch overlap their memory loads
// (debuginfo.LineIndex.Locate), which names a long list of scattered
// addresses about 1.25 times as fast (BenchmarkFileManyLines). With room
// in dst it allocates nothing.
func (f *File) FramesOf(dst []Frame, addrs []uint64) []Frame {
	t := f.t.Load()
	if t.evicted.Load() || !t.symIndex {
		for _, a := range addrs {
			dst = f.Frames(dst, a)
		}
		return dst
	}
	t.ref.Store(true)
	var iv [locateBatch]uint32
	for len(addrs) > 0 {
		chunk := addrs[:min(len(addrs), locateBatch)]
		addrs = addrs[len(chunk):]
		for k, i := range t.index.Locate(iv[:0], chunk) {
			var buf [8]debuginfo.SourceFrame
			sfs, sym, ok, err := t.index.LookupInterval(buf[:0], i)
			dst = t.indexSourceFrames(dst, Frame{Address: chunk[k], Object: f.path}, chunk[k], sfs, sym, ok, err, f.s.demangle)
		}
	}
	return dst
}
