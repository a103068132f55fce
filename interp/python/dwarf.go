package python

import (
	"debug/dwarf"
	"errors"
	"fmt"
	"strings"

	"github.com/probekit/probekit/internal/safeelf"
)

// maxDebugSection bounds one DWARF section read for the offsets: the
// .debug_info of pyenv's libpython3.13.so is about 9 MiB.
const maxDebugSection = 256 << 20

// errNoTypes: the DWARF has not the structs the offsets come from.
var errNoTypes = errors.New("no CPython struct types in the DWARF")

// fieldPaths are, for each offset, where it is in the DWARF: a struct
// (a tag name, or a typedef name with "=") and a member path, tried in
// order. The first that resolves gives the offset; sizes are "sizeof".
var fieldPaths = map[string][][2]string{
	"RuntimeInterpHead": {{"pyruntimestate", "interpreters.head"}},
	"RuntimeGILHolder":  {{"pyruntimestate", "gilstate.tstate_current"}},
	"InterpNext":        {{"_is", "next"}},
	"InterpThreads":     {{"_is", "threads.head"}, {"_is", "tstate_head"}},
	"ThreadNext":        {{"_ts", "next"}},
	"ThreadID":          {{"_ts", "thread_id"}},
	"ThreadFrame":       {{"_ts", "current_frame"}, {"_ts", "frame"}, {"_ts", "cframe"}},
	"CFrameCurrent":     {{"_PyCFrame", "current_frame"}},
	"FrameCode":         {{"_PyInterpreterFrame", "f_code"}, {"_PyInterpreterFrame", "f_executable"}, {"_frame", "f_code"}},
	"FramePrevious":     {{"_PyInterpreterFrame", "previous"}, {"_frame", "f_back"}},
	"FrameInstr":        {{"_PyInterpreterFrame", "prev_instr"}, {"_PyInterpreterFrame", "instr_ptr"}, {"_frame", "f_lasti"}},
	"FrameIsEntry":      {{"_PyInterpreterFrame", "is_entry"}},
	"FrameOwner":        {{"_PyInterpreterFrame", "owner"}},
	"CodeFilename":      {{"PyCodeObject", "co_filename"}, {"=PyCodeObject", "co_filename"}},
	"CodeName":          {{"PyCodeObject", "co_name"}, {"=PyCodeObject", "co_name"}},
	"CodeQualname":      {{"PyCodeObject", "co_qualname"}, {"=PyCodeObject", "co_qualname"}},
	"CodeFirstLine":     {{"PyCodeObject", "co_firstlineno"}, {"=PyCodeObject", "co_firstlineno"}},
	"CodeLineTable":     {{"PyCodeObject", "co_linetable"}, {"=PyCodeObject", "co_linetable"}, {"PyCodeObject", "co_lnotab"}, {"=PyCodeObject", "co_lnotab"}},
	"CodeAdaptive":      {{"PyCodeObject", "co_code_adaptive"}, {"=PyCodeObject", "co_code_adaptive"}},
	"ASCIISize":         {{"=PyASCIIObject", "sizeof"}},
	"CompactSize":       {{"=PyCompactUnicodeObject", "sizeof"}},
	"StrLength":         {{"=PyASCIIObject", "length"}},
	"StrState":          {{"=PyASCIIObject", "state"}},
	"BytesSize":         {{"=PyBytesObject", "ob_base.ob_size"}},
	"BytesData":         {{"=PyBytesObject", "ob_sval"}},
}

// 3.8's PyCodeObject is a typedef of an anonymous struct, hence the
// "=PyCodeObject" alternatives; 3.10 replaced co_lnotab with
// co_linetable (PEP 626), hence its order.

// dwarfOffsets reads the offsets from the DWARF of ef (the object or its
// debug file).
func dwarfOffsets(ef *safeelf.File) (o Offsets, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("DWARF: %v", r)
		}
	}()
	d, err := openDWARF(ef)
	if err != nil {
		return o, err
	}
	types, err := findTypes(d)
	if err != nil {
		return o, err
	}
	o = none()
	for _, f := range o.fields() {
		for _, c := range fieldPaths[f.name] {
			st := types[c[0]]
			if st == nil {
				continue
			}
			if c[1] == "sizeof" {
				*f.p = int(st.ByteSize)
				break
			}
			if off, ok := memberOffset(st, c[1]); ok {
				*f.p = off
				break
			}
		}
	}
	return o, nil
}

func openDWARF(ef *safeelf.File) (*dwarf.Data, error) {
	sec := map[string][]byte{}
	for _, n := range []string{"abbrev", "info", "str", "str_offsets", "addr", "line_str", "rnglists", "ranges"} {
		b, err := ef.DebugSection(".debug_"+n, maxDebugSection)
		if err != nil {
			return nil, fmt.Errorf("DWARF: .debug_%s: %w", n, err)
		}
		sec[n] = b
	}
	if sec["info"] == nil {
		return nil, fmt.Errorf("DWARF: no .debug_info")
	}
	d, err := dwarf.New(sec["abbrev"], nil, nil, sec["info"], nil, nil, sec["ranges"], sec["str"])
	if err != nil {
		return nil, fmt.Errorf("DWARF: %w", err)
	}
	for _, n := range []string{"str_offsets", "addr", "line_str", "rnglists"} {
		if sec[n] != nil {
			if err := d.AddSection(".debug_"+n, sec[n]); err != nil {
				return nil, fmt.Errorf("DWARF: .debug_%s: %w", n, err)
			}
		}
	}
	return d, nil
}

// findTypes finds, among each unit's top-level entries, the first
// complete definition of each struct fieldPaths names.
func findTypes(d *dwarf.Data) (map[string]*dwarf.StructType, error) {
	want := map[string]bool{}
	for _, cs := range fieldPaths {
		for _, c := range cs {
			want[c[0]] = true
		}
	}
	found := map[string]*dwarf.StructType{}
	r := d.Reader()
	for len(found) < len(want) {
		cu, err := r.Next()
		if err != nil {
			return nil, fmt.Errorf("DWARF: %w", err)
		}
		if cu == nil {
			break
		}
		if cu.Tag != dwarf.TagCompileUnit && cu.Tag != dwarf.TagPartialUnit {
			r.SkipChildren()
			continue
		}
		if !cu.Children {
			continue
		}
		for {
			e, err := r.Next()
			if err != nil {
				return nil, fmt.Errorf("DWARF: %w", err)
			}
			if e == nil || e.Tag == 0 {
				break
			}
			name, _ := e.Val(dwarf.AttrName).(string)
			key := ""
			switch e.Tag {
			case dwarf.TagStructType:
				key = name
			case dwarf.TagTypedef:
				key = "=" + name
			}
			if key != "" && want[key] && found[key] == nil {
				if decl, _ := e.Val(dwarf.AttrDeclaration).(bool); !decl {
					if st := structOf(d, e.Offset); st != nil {
						found[key] = st
					}
				}
			}
			if e.Children {
				r.SkipChildren()
			}
		}
	}
	if len(found) == 0 {
		return nil, errNoTypes
	}
	return found, nil
}

// structOf is the struct at off (through typedefs), or nil.
func structOf(d *dwarf.Data, off dwarf.Offset) *dwarf.StructType {
	t, err := d.Type(off)
	if err != nil {
		return nil
	}
	st, _ := under(t).(*dwarf.StructType)
	if st == nil || st.Incomplete {
		return nil
	}
	return st
}

func under(t dwarf.Type) dwarf.Type {
	for i := 0; i < 16; i++ {
		switch u := t.(type) {
		case *dwarf.TypedefType:
			t = u.Type
		case *dwarf.QualType:
			t = u.Type
		default:
			return t
		}
	}
	return t
}

// memberOffset resolves a dotted member path in st.
func memberOffset(st *dwarf.StructType, path string) (int, bool) {
	off := 0
	parts := strings.Split(path, ".")
	for i, p := range parts {
		var f *dwarf.StructField
		for _, c := range st.Field {
			if c.Name == p {
				f = c
				break
			}
		}
		if f == nil {
			return 0, false
		}
		off += int(f.ByteOffset)
		if i == len(parts)-1 {
			return off, true
		}
		if st, _ = under(f.Type).(*dwarf.StructType); st == nil {
			return 0, false
		}
	}
	return 0, false
}
