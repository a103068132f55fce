package python

// Line tables: the source line of a bytecode offset, by CPython's
// format of each version. Each decoder reads only the bytes given, and
// returns 0 for "no line" (an offset past the table, or an entry that
// says none).

// lineLnotab decodes co_lnotab (3.8-3.9): byte pairs (bytecode
// increment, signed line increment) from (0, firstLine); the line of
// offset is the last reached before the bytecode address passes it
// (CPython's PyCode_Addr2Line of those versions, Objects/lnotab_notes.txt).
func lineLnotab(tab []byte, firstLine int, offset uint32) int {
	line, addr := firstLine, uint32(0)
	for i := 0; i+1 < len(tab); i += 2 {
		addr += uint32(tab[i])
		if addr > offset {
			break
		}
		line += int(int8(tab[i+1]))
	}
	return line
}

// lineTable310 decodes 3.10's co_linetable (PEP 626): byte pairs
// (bytecode length in bytes, signed line delta); a delta of -128 means
// the range has no line. The line of offset is that of the range
// [start, start+length) holding it.
func lineTable310(tab []byte, firstLine int, offset uint32) int {
	line, start := firstLine, uint32(0)
	for i := 0; i+1 < len(tab); i += 2 {
		end := start + uint32(tab[i])
		d := int8(tab[i+1])
		cur := -1
		if d != -128 {
			line += int(d)
			cur = line
		}
		if offset >= start && offset < end {
			if cur < 0 {
				return 0
			}
			return cur
		}
		start = end
	}
	return 0
}

// lineLocations decodes the location table of 3.11+
// (Objects/locations.md): entries of a first byte with bit 7 set, its
// code in bits 3-6 and its length in code units minus one in bits 0-2,
// followed by varints (6 bits a byte, bit 6 continues); code 15 has no
// location, 14 a signed line delta and three varints, 13 a signed line
// delta, 10-12 a line delta of code-10 and two bytes, 0-9 the same line
// and one byte.
func lineLocations(tab []byte, firstLine int, offset uint32) int {
	line, addr := firstLine, uint32(0)
	i := 0
	varint := func() (uint32, bool) {
		var v uint32
		for shift := uint(0); shift < 32; shift += 6 {
			if i >= len(tab) {
				return 0, false
			}
			b := tab[i]
			i++
			v |= uint32(b&63) << shift
			if b&64 == 0 {
				return v, true
			}
		}
		return 0, false
	}
	svarint := func() (int, bool) {
		u, ok := varint()
		if u&1 != 0 {
			return -int(u >> 1), ok
		}
		return int(u >> 1), ok
	}
	for i < len(tab) {
		b := tab[i]
		i++
		if b&0x80 == 0 {
			return 0 // not an entry's first byte: corrupt
		}
		code := (b >> 3) & 15
		end := addr + (uint32(b&7)+1)*2
		cur := -1
		switch {
		case code == 15:
		case code == 14:
			d, ok := svarint()
			if !ok {
				return 0
			}
			line += d
			cur = line
			for k := 0; k < 3; k++ {
				if _, ok := varint(); !ok {
					return 0
				}
			}
		case code == 13:
			d, ok := svarint()
			if !ok {
				return 0
			}
			line += d
			cur = line
		case code >= 10:
			line += int(code) - 10
			cur = line
			i += 2
		default:
			cur = line
			i++
		}
		if offset >= addr && offset < end {
			if cur < 0 {
				return 0
			}
			return cur
		}
		addr = end
	}
	return 0
}
