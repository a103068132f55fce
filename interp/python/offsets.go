package python

import "fmt"

// Offsets are the byte offsets, inside CPython's structs, of the fields
// the BPF walk and Name read; -1 for a field the version has not.
type Offsets struct {
	// _PyRuntimeState.
	RuntimeInterpHead int // interpreters.head
	RuntimeGILHolder  int // gilstate.tstate_current (3.8-3.11)
	// PyInterpreterState.
	InterpNext    int // next
	InterpThreads int // threads.head (tstate_head before 3.11)
	// PyThreadState.
	ThreadNext    int // next
	ThreadID      int // thread_id
	ThreadFrame   int // frame (3.8-3.10), cframe (3.11-3.12), current_frame (3.13+)
	CFrameCurrent int // _PyCFrame.current_frame (3.11-3.12)
	// _PyInterpreterFrame (3.11+), PyFrameObject before.
	FrameCode     int // f_code, f_executable (3.13+)
	FramePrevious int // previous, f_back
	FrameInstr    int // prev_instr, instr_ptr (3.13+), f_lasti
	FrameIsEntry  int // is_entry (3.11)
	FrameOwner    int // owner (3.11+)
	// PyCodeObject.
	CodeFilename  int
	CodeName      int
	CodeQualname  int // 3.11+
	CodeFirstLine int // co_firstlineno
	CodeLineTable int // co_lnotab (3.8-3.9), co_linetable (3.10+)
	CodeAdaptive  int // co_code_adaptive (3.11+)
	// Strings: sizeof(PyASCIIObject), sizeof(PyCompactUnicodeObject)
	// and PyASCIIObject.state.
	ASCIISize   int
	CompactSize int
	StrLength   int
	StrState    int
	// PyBytesObject.
	BytesSize int // ob_size
	BytesData int // ob_sval
}

// fields lists the offsets by name, for tests and errors.
func (o *Offsets) fields() []struct {
	name string
	p    *int
} {
	return []struct {
		name string
		p    *int
	}{
		{"RuntimeInterpHead", &o.RuntimeInterpHead}, {"RuntimeGILHolder", &o.RuntimeGILHolder},
		{"InterpNext", &o.InterpNext}, {"InterpThreads", &o.InterpThreads},
		{"ThreadNext", &o.ThreadNext}, {"ThreadID", &o.ThreadID}, {"ThreadFrame", &o.ThreadFrame},
		{"CFrameCurrent", &o.CFrameCurrent},
		{"FrameCode", &o.FrameCode}, {"FramePrevious", &o.FramePrevious}, {"FrameInstr", &o.FrameInstr},
		{"FrameIsEntry", &o.FrameIsEntry}, {"FrameOwner", &o.FrameOwner},
		{"CodeFilename", &o.CodeFilename}, {"CodeName", &o.CodeName}, {"CodeQualname", &o.CodeQualname},
		{"CodeFirstLine", &o.CodeFirstLine}, {"CodeLineTable", &o.CodeLineTable}, {"CodeAdaptive", &o.CodeAdaptive},
		{"ASCIISize", &o.ASCIISize}, {"CompactSize", &o.CompactSize}, {"StrLength", &o.StrLength}, {"StrState", &o.StrState},
		{"BytesSize", &o.BytesSize}, {"BytesData", &o.BytesData},
	}
}

// check says which offset the version needs and lacks, or which is
// out of a struct's plausible range.
func (o *Offsets) check(v Version) error {
	for _, f := range o.fields() {
		if *f.p > maxStructOffset {
			return fmt.Errorf("offset %s = %d out of range", f.name, *f.p)
		}
	}
	need := []string{"RuntimeInterpHead", "InterpNext", "InterpThreads", "ThreadNext", "ThreadID",
		"ThreadFrame", "FrameCode", "FramePrevious", "FrameInstr", "CodeFilename", "CodeName",
		"CodeFirstLine", "CodeLineTable", "ASCIISize", "CompactSize", "StrLength", "StrState",
		"BytesSize", "BytesData"}
	if v.Minor >= 11 {
		need = append(need, "CodeQualname", "CodeAdaptive")
	}
	if v.Minor == 11 {
		need = append(need, "FrameIsEntry")
	}
	if v.Minor == 11 || v.Minor == 12 {
		need = append(need, "CFrameCurrent")
	}
	if v.Minor >= 12 {
		need = append(need, "FrameOwner")
	}
	byName := map[string]int{}
	for _, f := range o.fields() {
		byName[f.name] = *f.p
	}
	for _, n := range need {
		if byName[n] < 0 {
			return fmt.Errorf("offset %s missing for %v", n, v)
		}
	}
	return nil
}

// maxStructOffset bounds every offset: 3.11's _PyRuntimeState is 166,688
// bytes, the largest struct read.
const maxStructOffset = 1 << 20

// none is an Offsets with every field absent.
func none() Offsets {
	var o Offsets
	for _, f := range o.fields() {
		*f.p = -1
	}
	return o
}
