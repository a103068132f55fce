package debuginfo

import (
	"cmp"
	"debug/dwarf"
	"fmt"
	"slices"
)

// The tree of a unit: subprograms with code (their address ranges) and
// the inlined calls inside them (DW_TAG_inlined_subroutine, DWARF 5
// §3.3.8), nested as the calls are, each with the call site
// (DW_AT_call_file, DW_AT_call_line) and the called function's name,
// found through DW_AT_abstract_origin.

const (
	attrMIPSLinkageName = dwarf.Attr(0x2007) // GCC before DWARF 4
)

// readTree reads the entries of unit un after its first (r is positioned
// there) into t's nodes and funcs.
func (l *Lines) readTree(t *unitTable, r *dwarf.Reader, un *lineUnit) error {
	names := map[dwarf.Offset]string{}
	nr := l.d.Reader()
	// open holds, per entry whose children are being read, the index
	// of the innermost node enclosing them (-1 for none) and the node
	// the entry itself is (-1 when it is none).
	type level struct{ enclosing, self int32 }
	open := []level{{-1, -1}}
	// Every entry takes at least one byte (its abbreviation code).
	for n := 0; n <= un.size; n++ {
		e, err := r.Next()
		if err != nil {
			return dwarfErr("info", err)
		}
		if e == nil {
			break
		}
		if e.Tag == 0 {
			top := open[len(open)-1]
			open = open[:len(open)-1]
			if top.self >= 0 {
				t.nodes[top.self].end = int32(len(t.nodes))
			}
			if len(open) == 0 {
				break
			}
			continue
		}
		enclosing := open[len(open)-1].enclosing
		self := int32(-1)
		switch e.Tag {
		case dwarf.TagSubprogram, dwarf.TagInlinedSubroutine:
			if e.Tag == dwarf.TagInlinedSubroutine && enclosing < 0 {
				break // no function to be inlined into
			}
			rs, err := l.d.Ranges(e)
			if err != nil {
				return dwarfErr("info", err)
			}
			if len(rs) == 0 {
				break // a declaration or an abstract instance
			}
			nd := dieNode{name: l.name(nr, e, names), ranges: rs, parent: -1, callFile: -1}
			if e.Tag == dwarf.TagInlinedSubroutine {
				nd.parent = enclosing
				if v, ok := e.Val(dwarf.AttrCallFile).(int64); ok && v >= 0 && v < 1<<31 {
					nd.callFile = int32(v)
				}
				if v, ok := e.Val(dwarf.AttrCallLine).(int64); ok && v >= 0 && v < 1<<31 {
					nd.callLine = int32(v)
				}
			}
			self = int32(len(t.nodes))
			nd.end = self + 1
			t.nodes = append(t.nodes, nd)
			t.bytes += 64 + int64(len(rs))*16
			if e.Tag == dwarf.TagSubprogram {
				for _, rg := range rs {
					if rg[1] > rg[0] {
						t.funcs = append(t.funcs, funcRange{rg[0], rg[1], self})
					}
				}
			}
		}
		if e.Children {
			next := enclosing
			if self >= 0 {
				next = self
			}
			open = append(open, level{next, self})
		}
	}
	for _, s := range names {
		t.bytes += int64(len(s))
	}
	t.bytes += int64(len(t.funcs)) * 24
	sortFuncs(t.funcs)
	return nil
}

func sortFuncs(fs []funcRange) {
	slices.SortStableFunc(fs, func(a, b funcRange) int { return cmp.Compare(a.lo, b.lo) })
}

// name is e's linkage name, else its name, looked up through
// DW_AT_abstract_origin and DW_AT_specification when e has neither.
func (l *Lines) name(nr *dwarf.Reader, e *dwarf.Entry, cache map[dwarf.Offset]string) string {
	if s, ok := cache[e.Offset]; ok {
		return s
	}
	plain := ""
	cur := e
	for depth := 0; cur != nil && depth < maxNameDepth; depth++ {
		if s, ok := cur.Val(dwarf.AttrLinkageName).(string); ok && s != "" {
			cache[e.Offset] = s
			return s
		}
		if s, ok := cur.Val(attrMIPSLinkageName).(string); ok && s != "" {
			cache[e.Offset] = s
			return s
		}
		if s, ok := cur.Val(dwarf.AttrName).(string); ok && plain == "" {
			plain = s
		}
		ref, ok := cur.Val(dwarf.AttrAbstractOrigin).(dwarf.Offset)
		if !ok {
			if ref, ok = cur.Val(dwarf.AttrSpecification).(dwarf.Offset); !ok {
				break
			}
		}
		if s, ok := cache[ref]; ok && depth > 0 {
			if plain == "" {
				plain = s
			}
			break
		}
		nr.Seek(ref)
		next, err := nr.Next()
		if err != nil || next == nil || next.Offset != ref {
			break
		}
		cur = next
	}
	cache[e.Offset] = plain
	return plain
}

// checkLineHeader checks the counts of a DWARF 5 line header at off in
// .debug_line (§6.2.4) against the bytes that hold them: debug/dwarf
// allocates a slice by each count before reading the entries.
func (l *Lines) checkLineHeader(off int64) error {
	b := l.lineSec
	bad := func(at int, msg string) error { return &LinesError{"line", uint64(at), msg} }
	if off < 0 || off >= int64(len(b)) {
		return bad(int(max(off, 0)), "DW_AT_stmt_list past the end of .debug_line")
	}
	p := int(off)
	if p+6 > len(b) {
		return bad(p, "truncated line header")
	}
	n := uint64(l.order.Uint32(b[p:]))
	offSz := 4
	p += 4
	if n == 0xffffffff {
		if p+10 > len(b) {
			return bad(p, "truncated line header")
		}
		n, offSz = l.order.Uint64(b[p:]), 8
		p += 8
	}
	if n > uint64(len(b)-p) {
		return bad(int(off), fmt.Sprintf("line unit length %d past the end of the section", n))
	}
	end := p + int(n)
	ver := int(l.order.Uint16(b[p:]))
	if ver < 5 {
		return nil // NUL-terminated lists: no counts
	}
	// version, address_size, segment_selector_size, header_length,
	// minimum_instruction_length, maximum_operations_per_instruction,
	// default_is_stmt, line_base, line_range, opcode_base.
	p += 2 + 1 + 1 + offSz + 6
	if p > end {
		return bad(p, "truncated line header")
	}
	opBase := int(b[p-1])
	p += max(opBase-1, 0)
	for list := 0; list < 2; list++ {
		if p >= end {
			return bad(p, "truncated line header")
		}
		nf := int(b[p])
		p++
		forms := make([]uint64, 0, nf)
		for range nf {
			var ok bool
			if _, p, ok = uleb(b, p, end); !ok {
				return bad(p, "truncated entry format")
			}
			var form uint64
			if form, p, ok = uleb(b, p, end); !ok {
				return bad(p, "truncated entry format")
			}
			forms = append(forms, form)
		}
		count, q, ok := uleb(b, p, end)
		if !ok {
			return bad(p, "truncated entry count")
		}
		p = q
		if count == 0 {
			continue
		}
		if nf == 0 || count > uint64(end-p) {
			return bad(p, fmt.Sprintf("%d entries with %d fields in %d bytes", count, nf, end-p))
		}
		for range count {
			for _, f := range forms {
				if p, ok = skipForm(b, p, end, f, offSz); !ok {
					return bad(p, fmt.Sprintf("entry field of form %#x truncated or not allowed", f))
				}
			}
		}
	}
	return nil
}

// skipForm skips one value of form in b[p:end] (the forms DWARF 5
// allows in a line header's entry formats).
func skipForm(b []byte, p, end int, form uint64, offSz int) (int, bool) {
	size := 0
	switch form {
	case 0x08: // DW_FORM_string
		for p < end && b[p] != 0 {
			p++
		}
		return p + 1, p < end
	case 0x0e, 0x1f, 0x1d: // strp, line_strp, strp_sup
		size = offSz
	case 0x0b, 0x25: // data1, strx1
		size = 1
	case 0x05, 0x26: // data2, strx2
		size = 2
	case 0x27: // strx3
		size = 3
	case 0x06, 0x28: // data4, strx4
		size = 4
	case 0x07: // data8
		size = 8
	case 0x1e: // data16
		size = 16
	case 0x0f, 0x1a: // udata, strx
		_, q, ok := uleb(b, p, end)
		return q, ok
	case 0x09: // block
		n, q, ok := uleb(b, p, end)
		if !ok || n > uint64(end-q) {
			return q, false
		}
		return q + int(n), true
	default:
		return p, false
	}
	return p + size, p+size <= end
}

// uleb reads an unsigned LEB128 number from b[p:end].
func uleb(b []byte, p, end int) (uint64, int, bool) {
	var v uint64
	for shift := uint(0); p < end; shift += 7 {
		c := b[p]
		p++
		if shift < 64 {
			v |= uint64(c&0x7f) << shift
		}
		if c&0x80 == 0 {
			return v, p, true
		}
	}
	return v, p, false
}
