package debuginfo

import (
	"encoding/binary"
	"fmt"
)

// Location lists (DWARF 5 §2.6.2): where a variable is, per address
// range. Go's debug/dwarf gives a DW_AT_location of class loclistptr as
// an offset (or, for DW_FORM_loclistx, an index) and reads no list; this
// file reads them, in both encodings:
//
//   - DWARF 2-4, .debug_loc: pairs of addresses (start, end), relative to
//     the base address (the unit's DW_AT_low_pc until a base address
//     selection entry, whose start is the largest address, sets another),
//     each followed by a 2-byte expression length and the expression; a
//     (0, 0) pair ends the list.
//   - DWARF 5, .debug_loclists: DW_LLE_* entries (§7.7.3), each bounded
//     entry followed by a ULEB128 expression length and the expression.
//
// Every read is bounded by the section: a list runs until its end entry,
// the end of the section, or maxLocEntries entries.

// maxLocEntries bounds the entries read from one location list. GCC's
// longest lists in libc have a few dozen entries; a list that claims more
// is corrupt or hostile.
const maxLocEntries = 4096

// DW_LLE_* (DWARF 5 §7.7.3, table 7.10).
const (
	lleEndOfList       = 0x00
	lleBaseAddressx    = 0x01
	lleStartxEndx      = 0x02
	lleStartxLength    = 0x03
	lleOffsetPair      = 0x04
	lleDefaultLocation = 0x05
	lleBaseAddress     = 0x06
	lleStartEnd        = 0x07
	lleStartLength     = 0x08
)

// locEntry is one entry of a location list: the expression holds for
// addresses in [lo, hi); def is a DW_LLE_default_location entry, which
// holds where no other entry does.
type locEntry struct {
	lo, hi uint64
	def    bool
	expr   []byte
}

// locReader reads the location lists of one unit.
type locReader struct {
	order    binary.ByteOrder
	addrSize int
	// base is the unit's base address (its DW_AT_low_pc).
	base uint64
	// addr is .debug_addr from the unit's DW_AT_addr_base on, for the
	// DW_LLE_*x entries of DWARF 5; nil when the unit has none.
	addr []byte
}

// locError is a malformed location list.
func locError(section string, off int, format string, args ...any) error {
	return &LinesError{section, uint64(off), fmt.Sprintf(format, args...)}
}

// readLoc reads the DWARF 2-4 list at off in .debug_loc (sec).
func (lr *locReader) readLoc(sec []byte, off int64) ([]locEntry, error) {
	if off < 0 || off >= int64(len(sec)) {
		return nil, locError("loc", int(off), "location list offset past the end of .debug_loc (%d bytes)", len(sec))
	}
	if lr.addrSize != 4 && lr.addrSize != 8 {
		return nil, locError("loc", int(off), "address size %d", lr.addrSize)
	}
	maxAddr := ^uint64(0) >> (64 - 8*lr.addrSize)
	base := lr.base
	var out []locEntry
	p := int(off)
	for n := 0; n < maxLocEntries; n++ {
		if p+2*lr.addrSize > len(sec) {
			return out, locError("loc", p, "list runs past the end of the section")
		}
		lo, hi := lr.address(sec[p:]), lr.address(sec[p+lr.addrSize:])
		p += 2 * lr.addrSize
		switch {
		case lo == 0 && hi == 0:
			return out, nil
		case lo == maxAddr:
			base = hi // a base address selection entry
			continue
		}
		if p+2 > len(sec) {
			return out, locError("loc", p, "expression length past the end of the section")
		}
		n := int(lr.order.Uint16(sec[p:]))
		p += 2
		if n > len(sec)-p {
			return out, locError("loc", p, "expression of %d bytes past the end of the section", n)
		}
		out = append(out, locEntry{lo: base + lo, hi: base + hi, expr: sec[p : p+n]})
		p += n
	}
	return out, locError("loc", int(off), "list of more than %d entries", maxLocEntries)
}

// readLoclists reads the DWARF 5 list at off in .debug_loclists (sec).
func (lr *locReader) readLoclists(sec []byte, off int64) ([]locEntry, error) {
	if off < 0 || off >= int64(len(sec)) {
		return nil, locError("loclists", int(off), "location list offset past the end of .debug_loclists (%d bytes)", len(sec))
	}
	if lr.addrSize != 4 && lr.addrSize != 8 {
		return nil, locError("loclists", int(off), "address size %d", lr.addrSize)
	}
	base := lr.base
	var out []locEntry
	p := int(off)
	bad := func(format string, args ...any) ([]locEntry, error) {
		return out, locError("loclists", p, format, args...)
	}
	for n := 0; n < maxLocEntries; n++ {
		if p >= len(sec) {
			return bad("list runs past the end of the section")
		}
		kind := sec[p]
		p++
		var e locEntry
		var ok bool
		switch kind {
		case lleEndOfList:
			return out, nil
		case lleBaseAddressx:
			var i uint64
			if i, p, ok = uleb(sec, p, len(sec)); !ok {
				return bad("truncated DW_LLE_base_addressx")
			}
			if base, ok = lr.indexed(i); !ok {
				return bad("DW_LLE_base_addressx index %d outside .debug_addr", i)
			}
			continue
		case lleBaseAddress:
			if p+lr.addrSize > len(sec) {
				return bad("truncated DW_LLE_base_address")
			}
			base = lr.address(sec[p:])
			p += lr.addrSize
			continue
		case lleStartxEndx, lleStartxLength:
			var i, j uint64
			if i, p, ok = uleb(sec, p, len(sec)); !ok {
				return bad("truncated DW_LLE_startx_*")
			}
			if j, p, ok = uleb(sec, p, len(sec)); !ok {
				return bad("truncated DW_LLE_startx_*")
			}
			if e.lo, ok = lr.indexed(i); !ok {
				return bad("address index %d outside .debug_addr", i)
			}
			if kind == lleStartxLength {
				e.hi = e.lo + j
			} else if e.hi, ok = lr.indexed(j); !ok {
				return bad("address index %d outside .debug_addr", j)
			}
		case lleOffsetPair:
			var a, b uint64
			if a, p, ok = uleb(sec, p, len(sec)); !ok {
				return bad("truncated DW_LLE_offset_pair")
			}
			if b, p, ok = uleb(sec, p, len(sec)); !ok {
				return bad("truncated DW_LLE_offset_pair")
			}
			e.lo, e.hi = base+a, base+b
		case lleDefaultLocation:
			e.def = true
		case lleStartEnd:
			if p+2*lr.addrSize > len(sec) {
				return bad("truncated DW_LLE_start_end")
			}
			e.lo, e.hi = lr.address(sec[p:]), lr.address(sec[p+lr.addrSize:])
			p += 2 * lr.addrSize
		case lleStartLength:
			if p+lr.addrSize > len(sec) {
				return bad("truncated DW_LLE_start_length")
			}
			e.lo = lr.address(sec[p:])
			p += lr.addrSize
			var n uint64
			if n, p, ok = uleb(sec, p, len(sec)); !ok {
				return bad("truncated DW_LLE_start_length")
			}
			e.hi = e.lo + n
		default:
			return bad("unknown location list entry kind %#x", kind)
		}
		var n uint64
		if n, p, ok = uleb(sec, p, len(sec)); !ok {
			return bad("truncated expression length")
		}
		if n > uint64(len(sec)-p) {
			return bad("expression of %d bytes past the end of the section", n)
		}
		e.expr = sec[p : p+int(n)]
		p += int(n)
		out = append(out, e)
	}
	return out, locError("loclists", int(off), "list of more than %d entries", maxLocEntries)
}

// loclistx is the offset in .debug_loclists of list i of a unit whose
// DW_AT_loclists_base is base (DWARF 5 §7.29: the offsets table, of
// offSz-byte entries relative to base, starts at base).
func loclistx(sec []byte, order binary.ByteOrder, base int64, i uint64, offSz int) (int64, error) {
	if base < 0 || base > int64(len(sec)) || i >= uint64(len(sec)) || base+int64(i)*int64(offSz)+int64(offSz) > int64(len(sec)) {
		return 0, locError("loclists", int(max(base, 0)), "DW_FORM_loclistx index %d outside the offsets table", i)
	}
	p := base + int64(i)*int64(offSz)
	var rel uint64
	if offSz == 8 {
		rel = order.Uint64(sec[p:])
	} else {
		rel = uint64(order.Uint32(sec[p:]))
	}
	if rel >= uint64(len(sec)) {
		return 0, locError("loclists", int(p), "list offset %#x past the end of the section", rel)
	}
	return base + int64(rel), nil
}

func (lr *locReader) address(b []byte) uint64 {
	if lr.addrSize == 8 {
		return lr.order.Uint64(b)
	}
	return uint64(lr.order.Uint32(b))
}

// indexed is entry i of the unit's .debug_addr table.
func (lr *locReader) indexed(i uint64) (uint64, bool) {
	if lr.addr == nil || i >= uint64(len(lr.addr)/lr.addrSize) {
		return 0, false
	}
	return lr.address(lr.addr[int(i)*lr.addrSize:]), true
}

// at is the expression that holds at pc: the first bounded entry holding
// it, else the default entry; nil when none does.
func locAt(es []locEntry, pc uint64) []byte {
	var def []byte
	for _, e := range es {
		if e.def {
			def = e.expr
		} else if pc >= e.lo && pc < e.hi {
			return e.expr
		}
	}
	return def
}
