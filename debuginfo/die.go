package debuginfo

import (
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"
)

// A reader of .debug_info entries (DWARF 5 §7.5) that decodes only the
// attributes a symbolizer uses (names, address ranges, call sites, the
// unit's bases) and skips the others by their form's size, with no
// allocation per entry. debug/dwarf decodes every attribute of every
// entry into a map-free but allocated Entry, and parses the abbreviation
// tables of all units when it opens the sections; on libc6-dbg's
// .debug_info (5.8 MiB) that cost 130 ms of the 200 ms a first
// symbolization of 10,000 addresses took.

// DWARF constants (DWARF 5 §7.5.4, §7.5.5, §7.5.6) used here.
const (
	tagCompileUnit       = 0x11
	tagPartialUnit       = 0x3c
	tagSkeletonUnit      = 0x4a
	tagSubprogram        = 0x2e
	tagInlinedSubroutine = 0x1d

	atSibling          = 0x01
	atName             = 0x03
	atStmtList         = 0x10
	atLowPC            = 0x11
	atHighPC           = 0x12
	atCompDir          = 0x1b
	atAbstractOrigin   = 0x31
	atSpecification    = 0x47
	atEntryPC          = 0x52
	atRanges           = 0x55
	atCallFile         = 0x58
	atCallLine         = 0x59
	atLinkageName      = 0x6e
	atStrOffsetsBase   = 0x72
	atAddrBase         = 0x73
	atRnglistsBase     = 0x74
	atMIPSLinkageName  = 0x2007 // GCC before DWARF 4
	formImplicitConst  = 0x21
	formIndirect       = 0x16
	maxAbbrevCode      = 1 << 20
	maxIndirectForms   = 4
	rangeListEntrySize = 17 // the smallest a range costs in a unit table
)

// Slots of the attributes a dieVals keeps.
const (
	slotName = iota
	slotLinkage
	slotLowPC
	slotHighPC
	slotRanges
	slotOrigin
	slotSpec
	slotCallFile
	slotCallLine
	slotSibling
	slotStmtList
	slotCompDir
	slotStrOffsetsBase
	slotAddrBase
	slotRnglistsBase
	slotEntryPC
	nSlots
)

func attrSlot(attr uint64) int8 {
	switch attr {
	case atName:
		return slotName
	case atLinkageName, atMIPSLinkageName:
		return slotLinkage
	case atLowPC:
		return slotLowPC
	case atHighPC:
		return slotHighPC
	case atRanges:
		return slotRanges
	case atAbstractOrigin:
		return slotOrigin
	case atSpecification:
		return slotSpec
	case atCallFile:
		return slotCallFile
	case atCallLine:
		return slotCallLine
	case atSibling:
		return slotSibling
	case atStmtList:
		return slotStmtList
	case atCompDir:
		return slotCompDir
	case atStrOffsetsBase:
		return slotStrOffsetsBase
	case atAddrBase:
		return slotAddrBase
	case atRnglistsBase:
		return slotRnglistsBase
	case atEntryPC:
		return slotEntryPC
	}
	return -1
}

// attrSpec is one attribute of an abbreviation, or a run of attributes
// that are not kept and whose forms have a size the unit fixes (form
// formSkip, n their bytes): a variable's name, file, line, column and
// type are two specs (DW_FORM_strp, then 7 bytes). 8 bytes: libc6-dbg's
// 2,063 abbreviation tables hold 330,000 attributes.
type attrSpec struct {
	form uint16
	slot int8
	// n is formSkip's size; for DW_FORM_implicit_const of a kept
	// attribute the value's low 32 bits, its high 32 bits in the n of
	// the spec after it (form 0).
	n uint32
}

// formSkip is the form of a run of skipped attributes (not a DWARF
// form: those end at 0x2c and resume at 0x1f01).
const formSkip = 0xff00

// abbrev is one abbreviation (DWARF 5 §7.5.3).
type abbrev struct {
	tag      uint32
	children bool
	first    int32 // of attrs, while the table is read
	attrs    []attrSpec
}

// formSize is the size of a value of form in a unit of the given offset
// size, address size and version, -1 for the forms whose values say
// their size (LEB128 numbers, strings, blocks, DW_FORM_indirect) and for
// unknown ones.
func formSize(form uint64, offSz, addrSz, version int) int {
	switch form {
	case 0x01: // addr
		return addrSz
	case 0x0b, 0x11, 0x0c, 0x25, 0x29: // data1, ref1, flag, strx1, addrx1
		return 1
	case 0x05, 0x12, 0x26, 0x2a: // data2, ref2, strx2, addrx2
		return 2
	case 0x27, 0x2b: // strx3, addrx3
		return 3
	case 0x06, 0x13, 0x1c, 0x28, 0x2c: // data4, ref4, ref_sup4, strx4, addrx4
		return 4
	case 0x07, 0x14, 0x20, 0x24: // data8, ref8, ref_sig8, ref_sup8
		return 8
	case 0x1e: // data16
		return 16
	case 0x0e, 0x17, 0x1f, 0x1d, 0x1f20, 0x1f21: // strp, sec_offset, line_strp, strp_sup, GNU_ref_alt, GNU_strp_alt
		return offSz
	case 0x10: // ref_addr: the address size in DWARF 2
		if version == 2 {
			return addrSz
		}
		return offSz
	case 0x19, formImplicitConst: // flag_present; implicit_const, in the abbreviation
		return 0
	}
	return -1
}

// abbrevTable is one unit's abbreviations by code.
type abbrevTable struct {
	byCode []abbrev // index code; tag 0 for codes not defined
}

// parseAbbrevs reads the abbreviation table at off in .debug_abbrev for
// unit u (whose sizes fix the forms' sizes).
func parseAbbrevs(b []byte, off uint64, u *lineUnit) (*abbrevTable, error) {
	return parseAbbrevsRuns(b, off, u, true)
}

// parseAbbrevsRuns is parseAbbrevs, with runs of skipped forms made one
// spec or (for the test that the two read the same) not.
func parseAbbrevsRuns(b []byte, off uint64, u *lineUnit, runs bool) (*abbrevTable, error) {
	if off >= uint64(len(b)) {
		return nil, &LinesError{"abbrev", off, "abbreviation table past the end of .debug_abbrev"}
	}
	// A first pass counts the codes and attributes, so the table is two
	// allocations of the size the bytes give.
	codes, attrs := 0, 0
	for p := int(off); ; {
		code, q, ok := uleb(b, p, len(b))
		if !ok || code == 0 {
			break
		}
		if code > maxAbbrevCode || code > uint64(codes)+uint64(q-int(off))+16 {
			return nil, &LinesError{"abbrev", uint64(p), fmt.Sprintf("abbreviation code %d too sparse", code)}
		}
		codes = max(codes, int(code)+1)
		n := 0
		if p, n, ok = skipAbbrev(b, q); !ok {
			break // the second pass says where
		}
		attrs += n
	}
	t := &abbrevTable{byCode: make([]abbrev, 0, codes)}
	specs := make([]attrSpec, 0, attrs) // of all the abbreviations, cut up at the end
	ends := make([]int, 0, codes)
	p := int(off)
	for {
		code, q, ok := uleb(b, p, len(b))
		if !ok {
			return nil, &LinesError{"abbrev", uint64(p), "truncated abbreviation code"}
		}
		p = q
		if code == 0 {
			break
		}
		var a abbrev
		start := len(specs)
		if a, specs, p, ok = parseAbbrev(b, p, specs, u, runs); !ok {
			return nil, &LinesError{"abbrev", uint64(p), "truncated or invalid abbreviation"}
		}
		// Codes are dense from 1 in every producer seen; a sparse code
		// costs one entry a byte of the table at most.
		if code > maxAbbrevCode || code > uint64(len(t.byCode))+uint64(p-int(off))+16 {
			return nil, &LinesError{"abbrev", uint64(p), fmt.Sprintf("abbreviation code %d too sparse", code)}
		}
		for uint64(len(t.byCode)) <= code {
			t.byCode = append(t.byCode, abbrev{})
			ends = append(ends, 0)
		}
		a.first = int32(start)
		t.byCode[code] = a
		ends[code] = len(specs)
	}
	for code := range t.byCode {
		if a := &t.byCode[code]; a.tag != 0 {
			a.attrs = specs[a.first:ends[code]:ends[code]]
		}
	}
	return t, nil
}

// findAbbrev reads only the abbreviation code of the table at off, for
// unit u.
func findAbbrev(b []byte, off, code uint64, u *lineUnit) (abbrev, bool) {
	p := int(off)
	for n := 0; p < len(b) && n < maxAbbrevCode; n++ {
		c, q, ok := uleb(b, p, len(b))
		if !ok || c == 0 {
			break
		}
		if c == code {
			a, specs, _, ok := parseAbbrev(b, q, nil, u, true)
			a.attrs = specs
			return a, ok
		}
		if p, _, ok = skipAbbrev(b, q); !ok {
			break
		}
	}
	return abbrev{}, false
}

// skipAbbrev steps over one abbreviation after its code, counting the
// specs its attributes take at most.
func skipAbbrev(b []byte, p int) (int, int, bool) {
	_, p, ok := uleb(b, p, len(b)) // tag
	p++                            // children
	for n := 0; ok && p < len(b); n++ {
		var attr, form uint64
		var ok2 bool
		attr, p, ok = uleb(b, p, len(b))
		form, p, ok2 = uleb(b, p, len(b))
		ok = ok && ok2
		if attr == 0 && form == 0 {
			return p, n, ok
		}
		if form == formImplicitConst {
			_, p, ok = sleb(b, p, len(b))
			n++ // the value's high half
		}
	}
	return p, 0, false
}

// parseAbbrev reads one abbreviation after its code, its attributes
// appended to specs: a run of skipped fixed-size forms as one formSkip.
func parseAbbrev(b []byte, p int, specs []attrSpec, u *lineUnit, runs bool) (abbrev, []attrSpec, int, bool) {
	var a abbrev
	tag, p, ok := uleb(b, p, len(b))
	if !ok || p >= len(b) || tag == 0 || tag > 0xffff {
		return a, specs, p, false
	}
	a.tag, a.children = uint32(tag), b[p] != 0
	p++
	first := len(specs)
	for {
		attr, q, ok1 := uleb(b, p, len(b))
		form, q, ok2 := uleb(b, q, len(b))
		if !ok1 || !ok2 || form > 0xffff || form == formSkip {
			return a, specs, p, false
		}
		p = q
		if attr == 0 && form == 0 {
			return a, specs, p, true
		}
		var v int64
		if form == formImplicitConst {
			if v, q, ok = sleb(b, p, len(b)); !ok {
				return a, specs, p, false
			}
			p = q
		}
		slot := attrSlot(attr)
		if sz := formSize(form, u.offSz, u.addrSz, u.version); runs && slot < 0 && sz >= 0 {
			if sz == 0 {
				continue
			}
			if n := len(specs); n > first && specs[n-1].form == formSkip && specs[n-1].n < 1<<16 {
				specs[n-1].n += uint32(sz)
			} else {
				specs = append(specs, attrSpec{form: formSkip, slot: -1, n: uint32(sz)})
			}
			continue
		}
		s := attrSpec{form: uint16(form), slot: slot}
		if form == formImplicitConst {
			s.n = uint32(v)
			specs = append(specs, s, attrSpec{n: uint32(uint64(v) >> 32)})
			continue
		}
		specs = append(specs, s)
	}
}

// attrVal is one attribute's raw value: its form (0 when absent) and the
// number the form holds (an offset, an index, an address, a constant, or
// for DW_FORM_string the offset of the string in .debug_info).
type attrVal struct {
	form uint16
	v    uint64
}

// dieVals is what one entry gives: its offset, abbreviation and the kept
// attributes.
type dieVals struct {
	off  int
	next int // offset of the next entry
	ab   *abbrev
	a    [nSlots]attrVal
}

func (d *dieVals) has(slot int) bool { return d.a[slot].form != 0 }

// dwarfSections are the DWARF sections Lines reads, decompressed, each
// fetched on first need.
type dwarfSections struct {
	info, abbrev []byte
	lazy         map[string]*lazySection // by name without ".debug_"
}

type lazySection struct {
	once sync.Once
	get  func() ([]byte, error)
	b    []byte
	err  error
	done atomic.Bool
}

func (s *lazySection) bytes() ([]byte, error) {
	s.once.Do(func() {
		s.b, s.err = s.get()
		s.get = nil
		s.done.Store(true)
	})
	return s.b, s.err
}

// section returns the named lazy section; an error reading it is a
// LinesError at its start.
func (s *dwarfSections) section(name string) ([]byte, error) {
	ls := s.lazy[name]
	if ls == nil {
		return nil, nil
	}
	b, err := ls.bytes()
	if err != nil {
		return nil, &LinesError{name, 0, err.Error()}
	}
	return b, nil
}

// readerOf is a cursor over one unit's entries.
type dieReader struct {
	l  *Lines
	u  *lineUnit
	ab *abbrevTable
	// one is the only abbreviation known, of code oneCode, when ab is
	// nil (the unit index reads the units' first entries only).
	one     *abbrev
	oneCode uint64
	b       []byte // .debug_info
	end     int    // the unit's end
}

// decode reads the entry at p into d; d.ab is nil for a null entry (the
// end of a list of children).
func (r *dieReader) decode(p int, d *dieVals) error {
	b := r.b
	d.off = p
	code, p, ok := uleb(b, p, r.end)
	if !ok {
		return &LinesError{"info", uint64(d.off), "truncated abbreviation code"}
	}
	if code == 0 {
		d.ab, d.next = nil, p
		return nil
	}
	var ab *abbrev
	switch {
	case r.ab == nil && r.one != nil && code == r.oneCode:
		ab = r.one
	case r.ab != nil && code < uint64(len(r.ab.byCode)) && r.ab.byCode[code].tag != 0:
		ab = &r.ab.byCode[code]
	default:
		return &LinesError{"info", uint64(d.off), fmt.Sprintf("abbreviation code %d not defined", code)}
	}
	d.ab = ab
	d.a = [nSlots]attrVal{}
	u := r.u
	attrs := ab.attrs
	for i := 0; i < len(attrs); i++ {
		s := attrs[i]
		form := uint64(s.form)
		var v uint64
		if form == formSkip {
			if int(s.n) > r.end-p {
				return &LinesError{"info", uint64(p), "attributes past the end of the unit"}
			}
			p += int(s.n)
			continue
		}
		for k := 0; form == formIndirect; k++ {
			if k == maxIndirectForms {
				return &LinesError{"info", uint64(p), "DW_FORM_indirect chain"}
			}
			if form, p, ok = uleb(b, p, r.end); !ok {
				return &LinesError{"info", uint64(p), "truncated DW_FORM_indirect"}
			}
		}
		size := formSize(form, u.offSz, u.addrSz, u.version)
		switch form {
		case 0x0f, 0x15, 0x1a, 0x1b, 0x22, 0x23, 0x1f01, 0x1f02: // udata, ref_udata, strx, addrx, loclistx, rnglistx, GNU_addr_index, GNU_str_index
			if v, p, ok = uleb(b, p, r.end); !ok {
				return &LinesError{"info", uint64(p), "truncated LEB128 attribute"}
			}
		case 0x0d: // sdata
			var sv int64
			if sv, p, ok = sleb(b, p, r.end); !ok {
				return &LinesError{"info", uint64(p), "truncated LEB128 attribute"}
			}
			v = uint64(sv)
		case 0x08: // string
			v = uint64(p)
			for p < r.end && b[p] != 0 {
				p++
			}
			if p >= r.end {
				return &LinesError{"info", v, "unterminated string"}
			}
			p++
		case 0x09, 0x18: // block, exprloc
			n, q, ok := uleb(b, p, r.end)
			if !ok || n > uint64(r.end-q) {
				return &LinesError{"info", uint64(p), "block past the end of the unit"}
			}
			p = q + int(n)
		case 0x0a: // block1
			if p >= r.end || int(b[p]) > r.end-p-1 {
				return &LinesError{"info", uint64(p), "block past the end of the unit"}
			}
			p += 1 + int(b[p])
		case 0x03: // block2
			if p+2 > r.end || int(r.l.order.Uint16(b[p:])) > r.end-p-2 {
				return &LinesError{"info", uint64(p), "block past the end of the unit"}
			}
			p += 2 + int(r.l.order.Uint16(b[p:]))
		case 0x04: // block4
			if p+4 > r.end || uint64(r.l.order.Uint32(b[p:])) > uint64(r.end-p-4) {
				return &LinesError{"info", uint64(p), "block past the end of the unit"}
			}
			p += 4 + int(r.l.order.Uint32(b[p:]))
		case formImplicitConst:
			// The value is the abbreviation's (not one DW_FORM_indirect
			// names: that has none).
			if s.form == formImplicitConst && i+1 < len(attrs) {
				v = uint64(s.n) | uint64(attrs[i+1].n)<<32
				i++
			}
		default:
			if size < 0 {
				return &LinesError{"info", uint64(p), fmt.Sprintf("form %#x", form)}
			}
		}
		if size > 0 {
			if size > r.end-p {
				return &LinesError{"info", uint64(p), fmt.Sprintf("attribute of form %#x past the end of the unit", form)}
			}
			if s.slot >= 0 {
				v = r.l.uintN(b[p:], size)
			}
			p += size
		}
		if s.slot >= 0 {
			d.a[s.slot] = attrVal{uint16(form), v}
		}
	}
	d.next = p
	return nil
}

// uintN reads a size-byte unsigned number (1, 2, 3, 4 or 8 bytes).
func (l *Lines) uintN(b []byte, size int) uint64 {
	switch size {
	case 1:
		return uint64(b[0])
	case 2:
		return uint64(l.order.Uint16(b))
	case 3:
		if l.order == binary.BigEndian {
			return uint64(b[0])<<16 | uint64(b[1])<<8 | uint64(b[2])
		}
		return uint64(b[2])<<16 | uint64(b[1])<<8 | uint64(b[0])
	case 4:
		return uint64(l.order.Uint32(b))
	case 8:
		return l.order.Uint64(b)
	}
	return 0
}

// isRef reports whether form is a reference within .debug_info, and
// resolves it to a section offset.
func (r *dieReader) ref(v attrVal) (int, bool) {
	switch v.form {
	case 0x11, 0x12, 0x13, 0x14, 0x15: // ref1, ref2, ref4, ref8, ref_udata: unit-relative
		if v.v >= uint64(r.u.end-r.u.start) {
			return 0, false
		}
		return r.u.start + int(v.v), true
	case 0x10: // ref_addr
		if v.v >= uint64(len(r.b)) {
			return 0, false
		}
		return int(v.v), true
	}
	return 0, false
}

// supRef resolves a reference into the supplementary file's .debug_info
// (DW_FORM_GNU_ref_alt, DW_FORM_ref_sup4, DW_FORM_ref_sup8).
func (r *dieReader) supRef(v attrVal) (*Lines, int, bool) {
	switch v.form {
	case 0x1f20, 0x1c, 0x24:
		if sup := r.l.sup; sup != nil && v.v < uint64(len(sup.sec.info)) {
			return sup, int(v.v), true
		}
	}
	return nil, 0, false
}

// str returns a string attribute's value, "" when absent or not a
// string. The string shares the section's bytes (immutable once read).
func (r *dieReader) str(v attrVal) string {
	var sec []byte
	off := v.v
	switch v.form {
	case 0x08: // string
		sec = r.b
	case 0x0e: // strp
		sec, _ = r.l.sec.section("str")
	case 0x1f: // line_strp
		sec, _ = r.l.sec.section("line_str")
	case 0x1f21, 0x1d: // GNU_strp_alt, strp_sup: in the supplementary file
		if r.l.sup == nil {
			return ""
		}
		sec, _ = r.l.sup.sec.section("str")
	case 0x1a, 0x25, 0x26, 0x27, 0x28, 0x1f02: // strx, strx1-4, GNU_str_index
		so, _ := r.l.sec.section("str_offsets")
		sz := uint64(r.u.offSz)
		at := r.u.cu.strOffsetsBase + off*sz
		if off > uint64(len(so)) || at+sz > uint64(len(so)) || at < r.u.cu.strOffsetsBase {
			return ""
		}
		off = r.l.uintN(so[at:], int(sz))
		sec, _ = r.l.sec.section("str")
	default:
		return ""
	}
	return cString(sec, off)
}

// cString is the NUL-terminated string at off in b, sharing b's bytes.
func cString(b []byte, off uint64) string {
	if off >= uint64(len(b)) {
		return ""
	}
	s := b[off:]
	n := 0
	for n < len(s) && s[n] != 0 {
		n++
	}
	if n == 0 {
		return ""
	}
	return unsafe.String(&s[0], n)
}

// addr returns an address attribute's value (DW_FORM_addr, or an index
// in .debug_addr from the unit's DW_AT_addr_base).
func (r *dieReader) addr(v attrVal) (uint64, bool) {
	switch v.form {
	case 0x01:
		return v.v, true
	case 0x1b, 0x29, 0x2a, 0x2b, 0x2c, 0x1f01: // addrx, addrx1-4, GNU_addr_index
		return r.l.debugAddr(r.u, r.u.cu.addrBase, v.v)
	}
	return 0, false
}

// debugAddr is the address at index i of .debug_addr from base.
func (l *Lines) debugAddr(u *lineUnit, base, i uint64) (uint64, bool) {
	sec, _ := l.sec.section("addr")
	sz := uint64(u.addrSz)
	at := base + i*sz
	if i > uint64(len(sec)) || at < base || at+sz > uint64(len(sec)) {
		return 0, false
	}
	return l.uintN(sec[at:], int(sz)), true
}

// isConst reports whether form is of class constant.
func isConst(form uint16) bool {
	switch form {
	case 0x0b, 0x05, 0x06, 0x07, 0x0d, 0x0f, formImplicitConst:
		return true
	}
	return false
}

// ranges appends the address ranges of the entry d (DW_AT_low_pc with
// DW_AT_high_pc, and DW_AT_ranges) to dst, as debug/dwarf's Data.Ranges
// gives them.
func (r *dieReader) ranges(dst [][2]uint64, d *dieVals) ([][2]uint64, error) {
	if lo, ok := r.addr(d.a[slotLowPC]); ok {
		hv := d.a[slotHighPC]
		if isConst(hv.form) {
			dst = append(dst, [2]uint64{lo, lo + hv.v})
		} else if hi, ok := r.addr(hv); ok {
			dst = append(dst, [2]uint64{lo, hi})
		}
	}
	rv := d.a[slotRanges]
	if rv.form == 0 {
		return dst, nil
	}
	u := r.u
	if u.version >= 5 {
		off := rv.v
		if rv.form == 0x23 { // rnglistx: an offset in the table at DW_AT_rnglists_base
			sec, err := r.l.sec.section("rnglists")
			if err != nil {
				return dst, err
			}
			sz := uint64(u.offSz)
			at := u.cu.rnglistsBase + off*sz
			if off > uint64(len(sec)) || at < u.cu.rnglistsBase || at+sz > uint64(len(sec)) {
				return dst, &LinesError{"info", uint64(d.off), "DW_FORM_rnglistx index past .debug_rnglists"}
			}
			off = u.cu.rnglistsBase + r.l.uintN(sec[at:], int(sz))
		} else if rv.form != 0x17 && rv.form != 0x06 && rv.form != 0x07 {
			return dst, nil
		}
		return r.l.rnglist(dst, u, off)
	}
	if rv.form != 0x17 && rv.form != 0x06 && rv.form != 0x07 {
		return dst, nil
	}
	return r.l.rangeList(dst, u, rv.v)
}

// rangeList reads the .debug_ranges list at off (DWARF 4 §2.17.3).
func (l *Lines) rangeList(dst [][2]uint64, u *lineUnit, off uint64) ([][2]uint64, error) {
	sec, err := l.sec.section("ranges")
	if err != nil {
		return dst, err
	}
	if off > uint64(len(sec)) {
		return dst, &LinesError{"ranges", off, "range list past the end of .debug_ranges"}
	}
	sz := u.addrSz
	baseSel := ^uint64(0) >> uint((8-sz)*8)
	base := u.cu.base
	for p := int(off); p+2*sz <= len(sec); p += 2 * sz {
		lo, hi := l.uintN(sec[p:], sz), l.uintN(sec[p+sz:], sz)
		if lo == 0 && hi == 0 {
			break
		}
		if lo == baseSel {
			base = hi
			continue
		}
		dst = append(dst, [2]uint64{base + lo, base + hi})
	}
	return dst, nil
}

// rnglist reads the .debug_rnglists list at off (DWARF 5 §2.17.3).
func (l *Lines) rnglist(dst [][2]uint64, u *lineUnit, off uint64) ([][2]uint64, error) {
	sec, err := l.sec.section("rnglists")
	if err != nil {
		return dst, err
	}
	if off > uint64(len(sec)) {
		return dst, &LinesError{"rnglists", off, "range list past the end of .debug_rnglists"}
	}
	bad := func(p int) error { return &LinesError{"rnglists", uint64(p), "truncated range list entry"} }
	base := u.cu.base
	sz := u.addrSz
	p := int(off)
	for p < len(sec) {
		op := sec[p]
		p++
		var a, b uint64
		var ok bool
		switch op {
		case 0: // DW_RLE_end_of_list
			return dst, nil
		case 1: // DW_RLE_base_addressx
			if a, p, ok = uleb(sec, p, len(sec)); !ok {
				return dst, bad(p)
			}
			if base, ok = l.debugAddr(u, u.cu.addrBase, a); !ok {
				return dst, &LinesError{"rnglists", uint64(p), "address index past .debug_addr"}
			}
		case 2, 3: // DW_RLE_startx_endx, DW_RLE_startx_length
			if a, p, ok = uleb(sec, p, len(sec)); !ok {
				return dst, bad(p)
			}
			if b, p, ok = uleb(sec, p, len(sec)); !ok {
				return dst, bad(p)
			}
			lo, ok1 := l.debugAddr(u, u.cu.addrBase, a)
			hi := lo + b
			ok2 := true
			if op == 2 {
				hi, ok2 = l.debugAddr(u, u.cu.addrBase, b)
			}
			if !ok1 || !ok2 {
				return dst, &LinesError{"rnglists", uint64(p), "address index past .debug_addr"}
			}
			dst = append(dst, [2]uint64{lo, hi})
		case 4: // DW_RLE_offset_pair
			if a, p, ok = uleb(sec, p, len(sec)); !ok {
				return dst, bad(p)
			}
			if b, p, ok = uleb(sec, p, len(sec)); !ok {
				return dst, bad(p)
			}
			dst = append(dst, [2]uint64{base + a, base + b})
		case 5: // DW_RLE_base_address
			if p+sz > len(sec) {
				return dst, bad(p)
			}
			base, p = l.uintN(sec[p:], sz), p+sz
		case 6: // DW_RLE_start_end
			if p+2*sz > len(sec) {
				return dst, bad(p)
			}
			dst = append(dst, [2]uint64{l.uintN(sec[p:], sz), l.uintN(sec[p+sz:], sz)})
			p += 2 * sz
		case 7: // DW_RLE_start_length
			if p+sz > len(sec) {
				return dst, bad(p)
			}
			a, p = l.uintN(sec[p:], sz), p+sz
			if b, p, ok = uleb(sec, p, len(sec)); !ok {
				return dst, bad(p)
			}
			dst = append(dst, [2]uint64{a, a + b})
		default:
			return dst, &LinesError{"rnglists", uint64(p - 1), fmt.Sprintf("range list entry kind %d", op)}
		}
	}
	return dst, bad(p)
}
