package python

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"

	"github.com/probekit/probekit/interp"
)

// Ceilings of what Name reads from the process.
const (
	// maxCodeHeader bounds the bytes read of a code object's header:
	// co_code_adaptive starts at 200 in 3.13, the farthest field.
	maxCodeHeader = 512
	// maxLineTable bounds a line table read: CPython's own stdlib's
	// largest (a generated parser) is some tens of KiB.
	maxLineTable = 1 << 20
	// maxCached bounds the code objects cached per interpreter; the
	// cache is emptied when it is full.
	maxCached = 16384
)

// Why a frame is Unreadable.
var (
	errNotCode = errors.New("not a code object")
	errRead    = errors.New("memory unreadable")
)

type codeInfo struct {
	// What checks the entry against the object now at the address.
	firstLine int32
	filename  uint64 // the co_filename pointer
	linetab   uint64 // the co_linetable pointer
	// The names and the line table.
	fn, file string
	tab      []byte
}

type nameCache struct {
	mu    sync.Mutex
	codes map[uint64]*codeInfo
	// mem is the process's memory: /proc/PID/mem, opened at the first
	// read (tests give another).
	mem   io.ReaderAt
	close func() error
}

func newNameCache() *nameCache { return &nameCache{codes: map[uint64]*codeInfo{}} }

// Close releases the interpreter's handle on the process's memory.
func (in *Interpreter) Close() error {
	in.names.mu.Lock()
	defer in.names.mu.Unlock()
	in.names.mem = nil
	if c := in.names.close; c != nil {
		in.names.close = nil
		return c()
	}
	return nil
}

// readAt reads len(b) bytes of the process's memory at addr.
func (in *Interpreter) readAt(b []byte, addr uint64) error {
	if in.names.mem == nil {
		f, err := os.Open("/proc/" + strconv.Itoa(in.Process.PID) + "/mem")
		if err != nil {
			return err
		}
		// The memory opened must be the process's: its identity is
		// checked after the open.
		if err := in.Process.Check(); err != nil {
			f.Close()
			return err
		}
		in.names.mem, in.names.close = f, f.Close
	}
	if addr > 1<<63 {
		return errRead
	}
	n, err := in.names.mem.ReadAt(b, int64(addr))
	if n == len(b) {
		return nil
	}
	if err == nil {
		err = errRead
	}
	return fmt.Errorf("%w: %d bytes at %#x: %v", errRead, len(b), addr, err)
}

// Name names one frame the BPF walk read from the process's memory:
// the function's qualified name (co_name before 3.11), its file and the
// line executing. A frame that cannot be read or named has Unreadable
// set. Safe for concurrent use; the process must still run.
func (in *Interpreter) Name(raw interp.Raw) interp.Frame {
	fr := interp.Frame{Runtime: "python"}
	if raw.Flags&interp.FlagBad != 0 {
		fr.Unreadable = "frame unreadable at the hit"
		return fr
	}
	in.names.mu.Lock()
	defer in.names.mu.Unlock()
	ci, err := in.code(raw.Code)
	if err != nil {
		fr.Unreadable = err.Error()
		return fr
	}
	fr.Func, fr.File = ci.fn, ci.file
	fr.Line = in.line(ci, raw.Instr)
	return fr
}

func (in *Interpreter) line(ci *codeInfo, instr uint32) int {
	if int32(instr) < 0 { // before the first instruction (prev_instr at its start - 1)
		return int(ci.firstLine)
	}
	switch {
	case in.Version.Minor >= 11:
		return lineLocations(ci.tab, int(ci.firstLine), instr)
	case in.Version.Minor == 10:
		return lineTable310(ci.tab, int(ci.firstLine), instr)
	}
	return lineLnotab(ci.tab, int(ci.firstLine), instr)
}

// code reads the code object at addr, or takes it from the cache when
// the object there is still the one cached (its first line and the
// pointers to its file name and line table unchanged: a freed code
// object's address is reused by another object).
func (in *Interpreter) code(addr uint64) (*codeInfo, error) {
	o := &in.Offsets
	if addr == 0 || addr&7 != 0 {
		return nil, errNotCode
	}
	hlen := max(o.CodeFilename, o.CodeName, o.CodeQualname, o.CodeFirstLine, o.CodeLineTable) + 8
	if hlen > maxCodeHeader {
		return nil, errors.New("code object layout too large")
	}
	hdr := make([]byte, hlen)
	if err := in.readAt(hdr, addr); err != nil {
		return nil, err
	}
	ptr := func(off int) uint64 { return binary.LittleEndian.Uint64(hdr[off:]) }
	if in.CodeType != 0 && ptr(8) != in.CodeType { // ob_type
		return nil, errNotCode
	}
	firstLine := int32(binary.LittleEndian.Uint32(hdr[o.CodeFirstLine:]))
	filename, linetab := ptr(o.CodeFilename), ptr(o.CodeLineTable)
	if ci := in.names.codes[addr]; ci != nil && ci.firstLine == firstLine && ci.filename == filename && ci.linetab == linetab {
		return ci, nil
	}
	nameAt := o.CodeName
	if o.CodeQualname >= 0 {
		nameAt = o.CodeQualname
	}
	fn, err := in.str(ptr(nameAt))
	if err != nil {
		return nil, fmt.Errorf("name: %w", err)
	}
	file, err := in.str(filename)
	if err != nil {
		return nil, fmt.Errorf("file name: %w", err)
	}
	tab, _ := in.bytes(linetab) // no line table: lines unknown
	ci := &codeInfo{firstLine: firstLine, filename: filename, linetab: linetab, fn: fn, file: file, tab: tab}
	if len(in.names.codes) >= maxCached {
		clear(in.names.codes)
	}
	in.names.codes[addr] = ci
	return ci, nil
}

// str reads a str object: compact ones only (code objects' names and
// file names are), ASCII, latin-1, UCS-2 or UCS-4.
func (in *Interpreter) str(addr uint64) (string, error) {
	o := &in.Offsets
	if addr == 0 {
		return "", errors.New("NULL string")
	}
	hdr := make([]byte, o.CompactSize)
	if err := in.readAt(hdr, addr); err != nil {
		return "", err
	}
	off, n, kind, err := strHeader(o, hdr)
	if err != nil {
		return "", err
	}
	b := make([]byte, n*kind)
	if err := in.readAt(b, addr+uint64(off)); err != nil {
		return "", err
	}
	return decodeChars(b, n, kind), nil
}

// bytes reads a bytes object's contents.
func (in *Interpreter) bytes(addr uint64) ([]byte, error) {
	o := &in.Offsets
	if addr == 0 {
		return nil, errors.New("NULL bytes")
	}
	var sz [8]byte
	if err := in.readAt(sz[:], addr+uint64(o.BytesSize)); err != nil {
		return nil, err
	}
	n := int64(binary.LittleEndian.Uint64(sz[:]))
	if n < 0 || n > maxLineTable {
		return nil, errors.New("line table larger than the ceiling")
	}
	b := make([]byte, n)
	if err := in.readAt(b, addr+uint64(o.BytesData)); err != nil {
		return nil, err
	}
	return b, nil
}
