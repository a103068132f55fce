package python

import (
	"errors"
	"fmt"
	"os"
	"path"
	"regexp"
	"strconv"
	"sync"

	"github.com/probekit/probekit/debuginfo"
	"github.com/probekit/probekit/internal/safeelf"
	"github.com/probekit/probekit/procmaps"
)

// Errors.
var (
	// ErrNotPython: the process maps no CPython (no object defining
	// _PyRuntime).
	ErrNotPython = errors.New("no CPython in the process")
	// ErrVersion: CPython of a version or build the package cannot read
	// (below 3.8, above 3.14, or no offsets from any source).
	ErrVersion = errors.New("unsupported CPython")
)

// Version is a CPython version. Micro is -1 when unknown (before 3.11, the version comes from the
// object's name).
type Version struct{ Major, Minor, Micro int }

func (v Version) String() string {
	if v.Micro < 0 {
		return fmt.Sprintf("%d.%d", v.Major, v.Minor)
	}
	return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Micro)
}

// Source says where an Interpreter's offsets come from.
type Source uint8

const (
	// SourceDWARF: the interpreter's DWARF (in the object or its debug
	// file).
	SourceDWARF Source = iota + 1
	// SourceDebugOffsets: _Py_DebugOffsets at the start of _PyRuntime
	// (3.13+), read from the file.
	SourceDebugOffsets
	// SourceTable: the package's table of released versions.
	SourceTable
)

func (s Source) String() string {
	switch s {
	case SourceDWARF:
		return "DWARF"
	case SourceDebugOffsets:
		return "_Py_DebugOffsets"
	case SourceTable:
		return "table"
	}
	return "Source(" + strconv.Itoa(int(s)) + ")"
}

// Interpreter is the CPython of one process.
type Interpreter struct {
	Process *procmaps.Process
	// Path is the object holding the interpreter (the executable, or
	// libpython3.X.so), as the process names it.
	Path    string
	Version Version
	// Runtime is the address of _PyRuntime in the process.
	Runtime uint64
	// CodeType is the address of PyCode_Type in the process (0 when
	// unknown): Name checks a code object's type against it.
	CodeType uint64
	Offsets  Offsets
	Source   Source
	// eval are the eval loop's runtime ranges.
	eval [][2]uint64
	// names is the cache of code objects.
	names *nameCache
}

// FindOptions tune Find. A nil *FindOptions means the defaults.
type FindOptions struct {
	// Debug finds the interpreter's debug file (nil: debuginfo's
	// defaults, for the process).
	Debug *debuginfo.Options
	// Source, when set, is the only source of offsets tried (tests
	// force the table).
	Source Source
}

// Find finds CPython in p: an object whose .dynsym defines _PyRuntime
// (the executable when it links libpython statically, as Debian's does,
// or a mapped libpython3.X.so; among the objects named python* or
// libpython* and the executable), its version, the runtime address of
// _PyRuntime and the struct offsets, from the interpreter's DWARF, then
// _Py_DebugOffsets (3.13+), then the table. It fails with ErrNotPython
// when p maps no CPython.
func Find(p *procmaps.Process) (*Interpreter, error) { return FindWith(p, nil) }

// FindWith is Find with options.
func FindWith(p *procmaps.Process, opts *FindOptions) (*Interpreter, error) {
	var o FindOptions
	if opts != nil {
		o = *opts
	}
	objs, err := p.Objects()
	if err != nil {
		return nil, err
	}
	// The executable may embed CPython under any name (uwsgi, a
	// program linking libpython statically).
	exe, _ := os.Readlink("/proc/" + strconv.Itoa(p.PID) + "/exe")
	var firstErr error
	for i := range objs {
		obj := &objs[i]
		if !pythonName.MatchString(path.Base(obj.Path)) && obj.Path != exe {
			continue
		}
		in, err := open(p, obj, &o)
		if errors.Is(err, ErrNotPython) {
			continue
		}
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		return in, nil
	}
	if firstErr != nil {
		return nil, firstErr
	}
	return nil, fmt.Errorf("%v: %w", p, ErrNotPython)
}

// pythonName matches the objects that may hold CPython: python3.X (and
// python3, python) executables, libpython3.X*.so*.
var pythonName = regexp.MustCompile(`^(lib)?python[0-9.]*[a-z]*(\.so.*)?$|^libpython`)

// fileName gives the version of a name such as libpython3.10.so.1.0 or
// python3.9d.
var fileName = regexp.MustCompile(`python(\d)\.(\d+)`)

// fileInfo is what Find learns of an object, at its link-time
// addresses; one per file, shared by the processes that map it.
type fileInfo struct {
	notPython          bool
	loadOff, loadVaddr uint64 // the first PT_LOAD
	runtime, codeType  uint64
	eval               [][2]uint64
	version            Version
	offsets            Offsets
	source             Source
}

// fileKey identifies a file's contents: device, inode, size and
// modification time (a package upgrade replaces the file or its
// contents).
type fileKey struct {
	id          procmaps.FileID
	size, mtime int64
}

// maxFiles bounds the cache of files Find read.
const maxFiles = 256

var files = struct {
	sync.Mutex
	m map[fileKey]*fileInfo
}{m: map[fileKey]*fileInfo{}}

func open(p *procmaps.Process, obj *procmaps.Object, o *FindOptions) (*Interpreter, error) {
	f, err := p.OpenObject(obj)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// Only the defaults' answers are cached: options change them.
	cacheable := o.Source == 0 && o.Debug == nil
	var key fileKey
	if st, err := f.Stat(); err == nil {
		key = fileKey{obj.ID(), st.Size(), st.ModTime().UnixNano()}
	} else {
		cacheable = false
	}
	var fi *fileInfo
	if cacheable {
		files.Lock()
		fi = files.m[key]
		files.Unlock()
	}
	if fi == nil {
		fi, err = readFile(p, obj, f, o)
		if err != nil && !errors.Is(err, ErrNotPython) {
			return nil, err
		}
		if cacheable {
			files.Lock()
			if len(files.m) >= maxFiles {
				clear(files.m)
			}
			files.m[key] = fi
			files.Unlock()
		}
	}
	if fi.notPython {
		return nil, ErrNotPython
	}
	addr, err := obj.Address(fi.loadOff, procmaps.Read)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", obj.Path, err)
	}
	bias := addr - fi.loadVaddr
	in := &Interpreter{Process: p, Path: obj.Path, Runtime: fi.runtime + bias, Version: fi.version,
		Offsets: fi.offsets, Source: fi.source, names: newNameCache()}
	if fi.codeType != 0 {
		in.CodeType = fi.codeType + bias
	}
	for _, r := range fi.eval {
		in.eval = append(in.eval, [2]uint64{r[0] + bias, r[1] + bias})
	}
	return in, nil
}

// readFile reads an object's symbols, version and offsets.
func readFile(p *procmaps.Process, obj *procmaps.Object, f *os.File, o *FindOptions) (*fileInfo, error) {
	not := &fileInfo{notPython: true}
	ef, err := safeelf.NewFile(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", obj.Path, err)
	}
	syms, err := ef.DynamicSymbols()
	if err != nil {
		return not, ErrNotPython
	}
	runtime, ok := defined(syms, "_PyRuntime")
	if !ok {
		return not, ErrNotPython
	}
	loads := ef.Loads()
	if len(loads) == 0 {
		return nil, fmt.Errorf("%s: no PT_LOAD", obj.Path)
	}
	fi := &fileInfo{loadOff: loads[0].Off, loadVaddr: loads[0].Vaddr, runtime: runtime.Value}
	if s, ok := defined(syms, "PyCode_Type"); ok {
		fi.codeType = s.Value
	}
	for _, name := range evalFuncs {
		if s, ok := defined(syms, name); ok && s.Size > 0 {
			fi.eval = append(fi.eval, [2]uint64{s.Value, s.Value + s.Size})
		}
	}
	// gcc moves the loop's unlikely paths into a local function,
	// NAME.cold, named only in .symtab (pyenv's builds keep it).
	if symtab, err := ef.Symbols(); err == nil {
		for _, name := range evalFuncs {
			if s, ok := defined(symtab, name+".cold"); ok && s.Size > 0 {
				fi.eval = append(fi.eval, [2]uint64{s.Value, s.Value + s.Size})
			}
		}
	}
	if fi.version, err = version(ef, syms, obj.Path); err != nil {
		return nil, fmt.Errorf("%s: %w", obj.Path, err)
	}
	v := fi.version
	if v.Major != 3 || v.Minor < 8 || v.Minor > 14 {
		return nil, fmt.Errorf("%s: CPython %v: %w (3.8 to 3.14 are)", obj.Path, v, ErrVersion)
	}
	var errs []error
	try := func(s Source) bool { return o.Source == 0 || o.Source == s }
	if try(SourceDWARF) {
		off, err := offsetsFromDWARF(f, obj.Path, ef, p, o.Debug)
		if err == nil {
			err = off.check(v)
		}
		if err == nil {
			fi.offsets, fi.source = off, SourceDWARF
			return fi, nil
		}
		errs = append(errs, err)
	}
	if try(SourceDebugOffsets) && v.Minor >= 13 {
		off, err := offsetsFromDebugOffsets(ef, runtime.Value, v)
		if err == nil {
			err = off.check(v)
		}
		if err == nil {
			fi.offsets, fi.source = off, SourceDebugOffsets
			return fi, nil
		}
		errs = append(errs, err)
	}
	if try(SourceTable) {
		if off, ok := tableOffsets(v); ok {
			fi.offsets, fi.source = off, SourceTable
			return fi, nil
		}
		errs = append(errs, fmt.Errorf("no table entry for %d.%d", v.Major, v.Minor))
	}
	return nil, fmt.Errorf("%s: CPython %v: %w: %w", obj.Path, v, ErrVersion, errors.Join(errs...))
}

// evalFuncs are the eval loop's functions: from 3.11 one call runs a
// run of Python frames, before one call runs one frame.
var evalFuncs = []string{"_PyEval_EvalFrameDefault"}

// EvalRanges are the runtime address ranges [start, end) of the eval
// loop's functions in the process: a native frame whose address is in
// one runs the next run of Python frames (interp.FlagRunEnd ends it).
func (in *Interpreter) EvalRanges() [][2]uint64 { return append([][2]uint64(nil), in.eval...) }

func defined(syms *safeelf.Symbols, name string) (safeelf.Symbol, bool) {
	var s safeelf.Symbol
	found := false
	syms.Lookup(name, func(i int) bool {
		c := syms.Symbol(i)
		if c.Section == 0 || c.Value == 0 { // SHN_UNDEF: an import
			return true
		}
		s, found = c, true
		return false
	})
	return s, found
}

// version reads Py_Version (3.11+: PY_VERSION_HEX in .rodata), else the
// object's name.
func version(ef *safeelf.File, syms *safeelf.Symbols, name string) (Version, error) {
	// Py_Version is an unsigned long: 8 bytes on LP64, 4 on ILP32.
	if s, ok := defined(syms, "Py_Version"); ok && (s.Size == 4 || s.Size == 8) {
		if off, ok := ef.Loads().DataOffset(s.Value); ok {
			b := make([]byte, s.Size)
			if err := ef.ReadFull(b, off); err == nil {
				hex := uint32(ef.ByteOrder.Uint32(b))
				if s.Size == 8 {
					hex = uint32(ef.ByteOrder.Uint64(b))
				}
				return Version{int(hex >> 24), int(hex >> 16 & 0xff), int(hex >> 8 & 0xff)}, nil
			}
		}
	}
	m := fileName.FindStringSubmatch(path.Base(name))
	if m == nil {
		return Version{}, fmt.Errorf("%w: no version in the name and no Py_Version", ErrVersion)
	}
	minor, _ := strconv.Atoi(m[2])
	return Version{Major: 3, Minor: minor, Micro: -1}, nil
}

// offsetsFromDWARF reads the offsets from the object's DWARF or its
// debug file's.
func offsetsFromDWARF(f *os.File, objPath string, ef *safeelf.File, p *procmaps.Process, opts *debuginfo.Options) (Offsets, error) {
	var o debuginfo.Options
	if opts != nil {
		o = *opts
	}
	if o.Process == nil {
		o.Process = p
	}
	df, err := debuginfo.Find(f, objPath, &o)
	if err != nil {
		return Offsets{}, err
	}
	defer df.Close()
	def, err := safeelf.NewFile(df.File)
	if err != nil {
		return Offsets{}, err
	}
	return dwarfOffsets(def)
}
