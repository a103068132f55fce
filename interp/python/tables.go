package python

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
)

// ProcsMap is python.bpf.h's map of processes.
const ProcsMap = "probekit_py_procs"

// DefaultProcesses is TablesOptions.Processes' default.
const DefaultProcesses = 1024

// procValue is sizeof(struct probekit_py_proc).
const procValue = 88

// maxRead is PROBEKIT_PY_READ: the walk reads a frame's or a thread
// state's fields in one read of at most this many bytes.
const maxRead = 256

// Chain modes (PROBEKIT_PY_MODE_*).
const (
	modeFrameObject = 1 // 3.8-3.10
	modeEntry       = 2 // 3.11
	modeShim        = 3 // 3.12+
)

// Stop is why a BPF walk of Python frames ended
// (probekit_interp_stack.stop).
type Stop uint32

// Stops (PROBEKIT_INTERP_STOP_*).
const (
	StopEnd       Stop = 1 // the outermost frame was read
	StopDepth     Stop = 2 // PROBEKIT_INTERP_MAX_FRAMES (MaxFrames)
	StopRead      Stop = 3 // a read failed: the last frame has FlagBad
	StopNoThread  Stop = 4 // no thread state of the interpreter is the thread's
	StopNoProcess Stop = 5 // the process is not in the map
	StopNoFrame   Stop = 6 // the thread runs no Python code
)

func (s Stop) String() string {
	switch s {
	case StopEnd:
		return "end"
	case StopDepth:
		return "depth"
	case StopRead:
		return "read failed"
	case StopNoThread:
		return "no thread state"
	case StopNoProcess:
		return "not a known process"
	case StopNoFrame:
		return "no Python frame"
	}
	return fmt.Sprintf("Stop(%d)", uint32(s))
}

// MaxFrames is PROBEKIT_INTERP_MAX_FRAMES.
const MaxFrames = 32

// TablesOptions size the map; zero fields take the defaults.
type TablesOptions struct {
	Processes int
}

// Tables owns python.bpf.h's map of processes: per process (by PID, the
// tgid the kernel's root namespace sees), where its interpreter's
// runtime is and the offsets the walk reads. A program including
// python.bpf.h uses it once Prepare adjusted its spec and the
// collection took Replacements. Safe for concurrent use.
type Tables struct {
	mu    sync.Mutex
	procs *ebpf.Map
	tp    int
}

// NewTables creates the map, and reads from the kernel's BTF where a
// task keeps its thread pointer.
func NewTables(opts *TablesOptions) (*Tables, error) {
	var o TablesOptions
	if opts != nil {
		o = *opts
	}
	if o.Processes == 0 {
		o.Processes = DefaultProcesses
	}
	if o.Processes < 0 {
		return nil, fmt.Errorf("python: %d processes", o.Processes)
	}
	tp, err := threadPointerOffset()
	if err != nil {
		return nil, err
	}
	m, err := ebpf.NewMap(&ebpf.MapSpec{Name: "pk_py_procs", Type: ebpf.Hash, KeySize: 4, ValueSize: procValue,
		MaxEntries: uint32(o.Processes)})
	if err != nil {
		return nil, fmt.Errorf("python: map %s: %w", ProcsMap, err)
	}
	return &Tables{procs: m, tp: tp}, nil
}

// Close releases the map (a collection that took it holds its own
// reference).
func (t *Tables) Close() error {
	if t.procs == nil {
		return nil
	}
	return t.procs.Close()
}

// Prepare sets the size of spec's python.bpf.h map to t's, which
// ebpf.CollectionOptions.MapReplacements requires, and checks its key
// and value sizes (a header of another version).
func (t *Tables) Prepare(spec *ebpf.CollectionSpec) error {
	ms := spec.Maps[ProcsMap]
	if ms == nil {
		return fmt.Errorf("python: the collection has no map %s (python.bpf.h not included)", ProcsMap)
	}
	if ms.KeySize != t.procs.KeySize() || ms.ValueSize != t.procs.ValueSize() {
		return fmt.Errorf("python: map %s of key %d and value %d bytes, want %d and %d (another python.bpf.h)",
			ProcsMap, ms.KeySize, ms.ValueSize, t.procs.KeySize(), t.procs.ValueSize())
	}
	ms.MaxEntries = t.procs.MaxEntries()
	ms.Flags = t.procs.Flags()
	return nil
}

// Replacements is the map for ebpf.CollectionOptions.MapReplacements,
// by its name in python.bpf.h.
func (t *Tables) Replacements() map[string]*ebpf.Map {
	return map[string]*ebpf.Map{ProcsMap: t.procs}
}

// Add sets pid's interpreter in the map (pid is the process's PID as
// the tracer's /proc sees it, the tgid BPF sees).
func (t *Tables) Add(pid int, in *Interpreter) error {
	val, err := in.procValue(t.tp)
	if err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.procs.Put(uint32(pid), val); err != nil {
		return fmt.Errorf("python: process %d: %w", pid, err)
	}
	return nil
}

// Remove takes pid out of the map; a PID not there is not an error.
func (t *Tables) Remove(pid int) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.procs.Delete(uint32(pid)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("python: process %d: %w", pid, err)
	}
	return nil
}

// procValue encodes struct probekit_py_proc.
func (in *Interpreter) procValue(tp int) ([]byte, error) {
	o := &in.Offsets
	if err := o.check(in.Version); err != nil {
		return nil, err
	}
	v := make([]byte, procValue)
	le := binary.LittleEndian // BPF runs in the host's order: x86-64 and arm64 are little-endian
	le.PutUint64(v[0:], in.Runtime)
	le.PutUint32(v[8:], uint32(in.Version.Major<<8|in.Version.Minor))
	mode, entry, unit, tag := modeShim, o.FrameOwner, 0, 0
	switch {
	case in.Version.Minor <= 10:
		mode, entry, unit = modeFrameObject, -1, 1
		if in.Version.Minor == 10 {
			unit = 2 // f_lasti counts code units from 3.10
		}
	case in.Version.Minor == 11:
		mode, entry = modeEntry, o.FrameIsEntry
	}
	if in.Version.Minor >= 14 {
		tag = 7 // _PyStackRef's tag bits (3.14); objects are 8-aligned
	}
	le.PutUint32(v[12:], uint32(mode))
	co := o.CodeAdaptive
	if co < 0 {
		co = 0
	}
	for i, x := range []int{tp, o.RuntimeInterpHead, o.RuntimeGILHolder, o.InterpNext, o.InterpThreads,
		o.ThreadNext, o.ThreadID, o.ThreadFrame, o.CFrameCurrent, o.FrameCode, o.FramePrevious,
		o.FrameInstr, entry, co} {
		le.PutUint32(v[16+4*i:], uint32(int32(x)))
	}
	le.PutUint32(v[72:], uint32(unit))
	le.PutUint32(v[76:], uint32(tag))
	// One read covers the fields: the instruction field is read as 8
	// bytes (f_lasti, an int, is followed by f_lineno in 3.8-3.10).
	frRead := max(o.FramePrevious, o.FrameCode, o.FrameInstr) + 8
	if entry >= 0 {
		frRead = max(frRead, entry+1)
	}
	tsRead := max(o.ThreadNext, o.ThreadID) + 8
	if frRead > maxRead || tsRead > maxRead {
		return nil, fmt.Errorf("python: CPython %v: frame fields end at %d, thread state fields at %d: more than %d bytes", in.Version, frRead, tsRead, maxRead)
	}
	le.PutUint32(v[80:], uint32(frRead))
	le.PutUint32(v[84:], uint32(tsRead))
	return v, nil
}

// threadPointerOffset is where a task_struct keeps its user thread
// pointer, from the kernel's BTF: x86-64 thread.fsbase, arm64
// thread.uw.tp_value.
var threadPointerOffset = sync.OnceValues(func() (int, error) {
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		return 0, fmt.Errorf("python: kernel BTF: %w", err)
	}
	var task *btf.Struct
	if err := spec.TypeByName("task_struct", &task); err != nil {
		return 0, fmt.Errorf("python: kernel BTF: %w", err)
	}
	path := []string{"thread", "fsbase"}
	if runtime.GOARCH == "arm64" {
		path = []string{"thread", "uw", "tp_value"}
	}
	off, ok := btfOffset(task, path)
	if !ok {
		return 0, fmt.Errorf("python: kernel BTF: no task_struct.%v", path)
	}
	return off, nil
})

// btfOffset resolves a member path in bytes, looking into anonymous
// members on the way.
func btfOffset(t btf.Type, path []string) (int, bool) {
	if len(path) == 0 {
		return 0, true
	}
	var members []btf.Member
	switch s := btf.UnderlyingType(t).(type) {
	case *btf.Struct:
		members = s.Members
	case *btf.Union:
		members = s.Members
	default:
		return 0, false
	}
	for _, m := range members {
		if m.Name == path[0] {
			if off, ok := btfOffset(m.Type, path[1:]); ok {
				return int(m.Offset.Bytes()) + off, true
			}
		}
		if m.Name == "" {
			if off, ok := btfOffset(m.Type, path); ok {
				return int(m.Offset.Bytes()) + off, true
			}
		}
	}
	return 0, false
}
