package debuginfo

import (
	"cmp"
	"slices"
	"sort"
)

// The tree of a unit: subprograms with code (their address ranges) and
// the inlined calls inside them (DW_TAG_inlined_subroutine, DWARF 5
// §3.3.8), nested as the calls are, each with the call site
// (DW_AT_call_file, DW_AT_call_line) and the called function's name,
// found through DW_AT_abstract_origin.

// readTree reads the entries of unit un after its first into t's nodes
// and funcs. Entries that hold no code in their children (types,
// variables, parameters, call sites) are stepped over by DW_AT_sibling
// when they have one.
func (l *Lines) readTree(t *unitTable, un *lineUnit) error {
	r, err := l.reader(un)
	if err != nil {
		return err
	}
	names := map[int]refName{}
	// open holds, per entry whose children are being read, the index
	// of the innermost node enclosing them (-1 for none) and the node
	// the entry itself is (-1 when it is none).
	type level struct{ enclosing, self int32 }
	open := []level{{-1, -1}}
	var d dieVals
	var rs [][2]uint64
	p := un.die
	if err := r.decode(p, &d); err != nil {
		return err
	}
	p = d.next
	if !d.ab.children {
		return nil
	}
	for p < un.end {
		if err := r.decode(p, &d); err != nil {
			return err
		}
		p = d.next
		if d.ab == nil {
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
		tag := d.ab.tag
		switch tag {
		case tagSubprogram, tagInlinedSubroutine:
			if tag == tagInlinedSubroutine && enclosing < 0 {
				break // no function to be inlined into
			}
			if rs, err = r.ranges(rs[:0], &d); err != nil {
				return err
			}
			if len(rs) == 0 {
				break // a declaration or an abstract instance
			}
			nd := dieNode{parent: -1}
			c := nodeCall{name: l.name(&r, &d, names), callFile: -1}
			if len(rs) == 1 {
				nd.lo, nd.hi = rs[0][0], rs[0][1]
			} else {
				nd.lo, nd.hi, nd.more = uint64(len(t.more)), uint64(len(rs)), true
				t.more = append(t.more, rs...)
			}
			if tag == tagInlinedSubroutine {
				nd.parent = enclosing
				if v := d.a[slotCallFile]; isConst(v.form) && v.v < 1<<31 {
					c.callFile = int32(v.v)
				}
				if v := d.a[slotCallLine]; isConst(v.form) && v.v < 1<<31 {
					c.callLine = int32(v.v)
				}
			}
			self = int32(len(t.nodes))
			nd.end = self + 1
			t.nodes = append(t.nodes, nd)
			t.calls = append(t.calls, c)
			t.bytes += 64
			if nd.more {
				t.bytes += int64(len(rs)) * 16
			}
			if tag == tagSubprogram {
				for _, rg := range rs {
					if rg[1] > rg[0] {
						t.funcs = append(t.funcs, funcRange{rg[0], rg[1], self})
					}
				}
			}
		}
		if d.ab.children {
			if !mayHoldCode(tag) {
				if sib, ok := r.ref(d.a[slotSibling]); ok && sib > p && sib <= un.end {
					p = sib
					continue
				}
			}
			next := enclosing
			if self >= 0 {
				next = self
			}
			open = append(open, level{next, self})
		}
	}
	t.bytes += int64(len(t.funcs)) * 24
	sortFuncs(t.funcs)
	return nil
}

// mayHoldCode reports whether an entry of tag may have subprograms or
// inlined calls among its descendants (DWARF 5 §3, §4, §5): scopes, and
// the types that may define member functions.
func mayHoldCode(tag uint32) bool {
	switch tag {
	case tagSubprogram, tagInlinedSubroutine,
		0x0b,       // lexical_block
		0x39,       // namespace
		0x02,       // class_type
		0x13,       // structure_type
		0x17,       // union_type
		0x1e,       // module
		0x32,       // try_block
		0x25,       // catch_block
		0x03,       // entry_point
		0x3d,       // imported_unit
		0x4107,     // GNU_template_template_param (may nest anything)
		0x11, 0x3c: // compile_unit, partial_unit
		return true
	}
	return false
}

func sortFuncs(fs []funcRange) {
	slices.SortStableFunc(fs, func(a, b funcRange) int { return cmp.Compare(a.lo, b.lo) })
}

// refName is what a chain of DW_AT_abstract_origin and
// DW_AT_specification references gives: its first linkage name and its
// first plain name.
type refName struct{ link, plain string }

// name is d's linkage name, else the first linkage name along its
// DW_AT_abstract_origin / DW_AT_specification chain, else d's name, else
// the first name along the chain. What a chain gives is cached by the
// entry it starts at (many inlined calls of one function share its
// abstract instance).
func (l *Lines) name(r *dieReader, d *dieVals, cache map[int]refName) string {
	if s := r.str(d.a[slotLinkage]); s != "" {
		return s
	}
	plain := r.str(d.a[slotName])
	lx, first, ok := r.target(d.a[slotOrigin])
	if !ok {
		if lx, first, ok = r.target(d.a[slotSpec]); !ok {
			return plain
		}
	}
	key := first
	if lx != l {
		key = -1 - first // an offset in the supplementary file
	}
	rn, ok := cache[key]
	if !ok {
		ref := first
		var next dieVals
		for depth := 1; depth < maxNameDepth; depth++ {
			nr, err := lx.readerAt(ref)
			if err != nil || nr.decode(ref, &next) != nil || next.ab == nil {
				break
			}
			if rn.link = nr.str(next.a[slotLinkage]); rn.link != "" {
				break
			}
			if rn.plain == "" {
				rn.plain = nr.str(next.a[slotName])
			}
			if lx, ref, ok = nr.target(next.a[slotOrigin]); !ok {
				if lx, ref, ok = nr.target(next.a[slotSpec]); !ok {
					break
				}
			}
		}
		cache[key] = rn
	}
	switch {
	case rn.link != "":
		return rn.link
	case plain != "":
		return plain
	}
	return rn.plain
}

// target resolves a reference to an entry: in this file, or in the
// supplementary one.
func (r *dieReader) target(v attrVal) (*Lines, int, bool) {
	if off, ok := r.ref(v); ok {
		return r.l, off, true
	}
	return r.supRef(v)
}

// readerAt returns a reader of the unit holding the .debug_info offset
// off.
func (l *Lines) readerAt(off int) (dieReader, error) {
	i := sort.Search(len(l.units), func(i int) bool { return l.units[i].end > off })
	if i == len(l.units) || off < l.units[i].die {
		return dieReader{}, &LinesError{"info", uint64(off), "reference outside every unit"}
	}
	return l.reader(&l.units[i])
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
