package python

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/probekit/probekit/internal/safeelf"
)

// debugCookie starts _Py_DebugOffsets, itself the start of _PyRuntime
// from CPython 3.13.
var debugCookie = []byte("xdebugpy")

// debugOffsets313 is the size of 3.13's _Py_DebugOffsets (584 bytes:
// eighteen groups of uint64 offsets, each group led by the size of its
// struct) and where each offset the package reads is in it. The layout
// is that of CPython 3.13.0's struct _Py_DebugOffsets as its DWARF
// gives it; 3.14 inserted fields, so other versions are refused
// here and take their offsets from DWARF or the table.
// TestDebugOffsetsMatchDWARF checks every offset read against DWARF.
const debugOffsets313 = 584

var debugFields313 = []struct {
	name string
	at   int
}{
	{"RuntimeInterpHead", 40}, // runtime_state.interpreters_head
	{"InterpNext", 64},        // interpreter_state.next
	{"InterpThreads", 72},     // interpreter_state.threads_head
	{"ThreadNext", 168},       // thread_state.next
	{"ThreadFrame", 184},      // thread_state.current_frame
	{"ThreadID", 192},         // thread_state.thread_id
	{"FramePrevious", 232},    // interpreter_frame.previous
	{"FrameCode", 240},        // interpreter_frame.executable
	{"FrameInstr", 248},       // interpreter_frame.instr_ptr
	{"FrameOwner", 264},       // interpreter_frame.owner
	{"CodeFilename", 280},     // code_object.filename
	{"CodeName", 288},         // code_object.name
	{"CodeQualname", 296},     // code_object.qualname
	{"CodeLineTable", 304},    // code_object.linetable
	{"CodeFirstLine", 312},    // code_object.firstlineno
	{"CodeAdaptive", 344},     // code_object.co_code_adaptive
	{"BytesSize", 520},        // bytes_object.ob_size
	{"BytesData", 528},        // bytes_object.ob_sval
	{"StrState", 544},         // unicode_object.state
	{"StrLength", 552},        // unicode_object.length
	{"ASCIISize", 560},        // unicode_object.asciiobject_size
}

// offsetsFromDebugOffsets reads _Py_DebugOffsets from the file at
// _PyRuntime's link-time address (it is initialized data, so in the
// file as in the process).
func offsetsFromDebugOffsets(ef *safeelf.File, runtime uint64, v Version) (Offsets, error) {
	off, ok := ef.Loads().DataOffset(runtime)
	if !ok {
		return Offsets{}, errors.New("_Py_DebugOffsets: _PyRuntime not in the file")
	}
	b := make([]byte, debugOffsets313)
	if err := ef.ReadFull(b, off); err != nil {
		return Offsets{}, fmt.Errorf("_Py_DebugOffsets: %w", err)
	}
	return decodeDebugOffsets(b, v)
}

// decodeDebugOffsets decodes 3.13's _Py_DebugOffsets (little-endian, as
// the targets python.bpf.h walks).
func decodeDebugOffsets(b []byte, v Version) (Offsets, error) {
	if len(b) < debugOffsets313 || !bytes.Equal(b[:8], debugCookie) {
		return Offsets{}, errors.New("_Py_DebugOffsets: no cookie at _PyRuntime")
	}
	le := binary.LittleEndian
	hex := le.Uint64(b[8:])
	major, minor := int(hex>>24&0xff), int(hex>>16&0xff)
	if major != v.Major || minor != v.Minor {
		return Offsets{}, fmt.Errorf("_Py_DebugOffsets of %d.%d in CPython %v", major, minor, v)
	}
	if minor != 13 {
		return Offsets{}, fmt.Errorf("_Py_DebugOffsets of %d.%d: only 3.13's layout is known", major, minor)
	}
	if le.Uint64(b[16:]) != 0 {
		return Offsets{}, errors.New("_Py_DebugOffsets: a free-threaded build (its objects' layout is not read)")
	}
	o := none()
	byName := map[string]*int{}
	for _, f := range o.fields() {
		byName[f.name] = f.p
	}
	for _, f := range debugFields313 {
		x := le.Uint64(b[f.at:])
		if x > maxStructOffset {
			return Offsets{}, fmt.Errorf("_Py_DebugOffsets: %s = %d out of range", f.name, x)
		}
		*byName[f.name] = int(x)
	}
	// PyCompactUnicodeObject is PyASCIIObject, utf8_length and utf8
	// (3.12+).
	o.CompactSize = o.ASCIISize + 16
	return o, nil
}
