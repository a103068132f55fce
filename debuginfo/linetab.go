package debuginfo

import (
	"fmt"
	"path"
	"slices"
	"sync/atomic"
)

// A reader of a unit's line number program (DWARF 5 §6.2, and the
// headers of versions 2 to 4) into the rows of a unitTable. It replaces
// debug/dwarf's LineReader, which allocates by the header's counts before
// reading the entries and builds every file's path up front; here a
// file's path is joined when a lookup first names it.

// lineFile is one entry of a line header's file table.
type lineFile struct {
	dir, name string // name as given, dir resolved as debug/dwarf resolves it
	full      atomic.Pointer[string]
}

// maxLineFiles bounds the file and directory tables of one header (a
// libc unit names at most a few hundred files).
const maxLineFiles = 1 << 16

// lineHeader is what the program needs of its header.
type lineHeader struct {
	version              int
	offSz, addrSz        int
	minInst, maxOps      int
	defaultStmt          bool
	lineBase             int
	lineRange            int
	opBase               int
	stdLens              []byte
	program, end         int // the program's bytes in .debug_line
	dirs                 []string
	files                []lineFile
	compDir              string
	unitVersion, unitOff int
}

// readLineProgram reads the program at off in .debug_line for unit un
// into t.
func (l *Lines) readLineProgram(t *unitTable, un *lineUnit, off int64) error {
	b, err := l.sec.section("line")
	if err != nil {
		return err
	}
	h, err := l.lineHeader(b, off, un)
	if err != nil {
		return err
	}
	t.files = h.files
	t.compDir, t.version = un.cu.compDir, un.version
	for i := range h.files {
		t.bytes += int64(len(h.files[i].name)) + 48
	}
	return l.runLineProgram(t, b, &h)
}

func (l *Lines) lineHeader(b []byte, off int64, un *lineUnit) (lineHeader, error) {
	var h lineHeader
	bad := func(at int, msg string) error { return &LinesError{"line", uint64(at), msg} }
	if off < 0 || off >= int64(len(b)) {
		return h, bad(int(max(off, 0)), "DW_AT_stmt_list past the end of .debug_line")
	}
	p := int(off)
	if p+4 > len(b) {
		return h, bad(p, "truncated line header")
	}
	n := uint64(l.order.Uint32(b[p:]))
	h.offSz = 4
	p += 4
	if n == 0xffffffff {
		if p+8 > len(b) {
			return h, bad(p, "truncated line header")
		}
		n, h.offSz = l.order.Uint64(b[p:]), 8
		p += 8
	}
	if n > uint64(len(b)-p) {
		return h, bad(int(off), fmt.Sprintf("line unit length %d past the end of the section", n))
	}
	end := p + int(n)
	h.end = end
	if p+2 > end {
		return h, bad(p, "truncated line header")
	}
	h.version = int(l.order.Uint16(b[p:]))
	p += 2
	if h.version < 2 || h.version > 5 {
		return h, bad(p-2, fmt.Sprintf("line table version %d", h.version))
	}
	h.addrSz = un.addrSz
	if h.version >= 5 {
		if p+2 > end {
			return h, bad(p, "truncated line header")
		}
		if a := int(b[p]); a == 4 || a == 8 {
			h.addrSz = a
		}
		p += 2 // address_size, segment_selector_size
	}
	if p+h.offSz > end {
		return h, bad(p, "truncated line header")
	}
	hlen := l.uintN(b[p:], h.offSz)
	p += h.offSz
	if hlen > uint64(end-p) {
		return h, bad(p, "header_length past the end of the line unit")
	}
	h.program = p + int(hlen)
	need := 4
	if h.version >= 4 {
		need = 5
	}
	if p+need > end {
		return h, bad(p, "truncated line header")
	}
	h.minInst = int(b[p])
	p++
	h.maxOps = 1
	if h.version >= 4 {
		h.maxOps = int(b[p])
		p++
	}
	h.defaultStmt = b[p] != 0
	h.lineBase = int(int8(b[p+1]))
	h.lineRange = int(b[p+2])
	h.opBase = int(b[p+3])
	p += 4
	if h.lineRange == 0 || h.maxOps == 0 {
		return h, bad(p, "line_range or maximum_operations_per_instruction is 0")
	}
	if h.opBase == 0 || p+h.opBase-1 > h.program {
		return h, bad(p, "standard_opcode_lengths past the header")
	}
	h.stdLens = b[p : p+h.opBase-1]
	p += h.opBase - 1
	compDir := un.cu.compDir
	if h.version < 5 {
		// Directory 0 is the compilation directory, file 0 none;
		// relative directories are under the compilation directory.
		h.dirs = append(h.dirs, compDir)
		for {
			s, q, err := listString(b, p, h.program, len(h.dirs), "include_directories")
			if p = q; err != nil {
				return h, err
			}
			if s == "" {
				break
			}
			if s[0] != '/' && compDir != "" {
				s = path.Join(compDir, s)
			}
			h.dirs = append(h.dirs, s)
		}
		h.files = make([]lineFile, 1, 16)
		for {
			s, q, err := listString(b, p, h.program, len(h.files), "file_names")
			if p = q; err != nil || s == "" {
				return h, err
			}
			dir, q, ok := uleb(b, p, h.program)
			if _, q, ok2 := uleb(b, q, h.program); ok && ok2 { // mtime
				if _, q, ok = uleb(b, q, h.program); ok { // length
					p = q
				}
			} else {
				ok = false
			}
			if !ok {
				return h, bad(p, "truncated file entry")
			}
			h.addFile(s, dir)
		}
	}
	// DWARF 5: an entry format, then the entries, for the directories
	// and then for the files.
	for list := 0; list < 2; list++ {
		if p >= h.program {
			return h, bad(p, "truncated entry format")
		}
		nf := int(b[p])
		p++
		var forms [8][2]uint64
		if nf > len(forms) {
			return h, bad(p, fmt.Sprintf("%d fields in an entry format", nf))
		}
		for k := range nf {
			var ok1, ok2 bool
			forms[k][0], p, ok1 = uleb(b, p, h.program)
			forms[k][1], p, ok2 = uleb(b, p, h.program)
			if !ok1 || !ok2 {
				return h, bad(p, "truncated entry format")
			}
		}
		count, q, ok := uleb(b, p, h.program)
		if !ok {
			return h, bad(p, "truncated entry count")
		}
		p = q
		if count > uint64(h.program-p) || count > maxLineFiles || (count > 0 && nf == 0) {
			return h, bad(p, fmt.Sprintf("%d entries with %d fields in %d bytes", count, nf, h.program-p))
		}
		if list == 1 {
			h.files = make([]lineFile, 0, count)
		}
		for range count {
			var name string
			var dir uint64
			for k := range nf {
				lnct, form := forms[k][0], forms[k][1]
				start := p
				if p, ok = skipForm(b, p, h.program, form, h.offSz); !ok {
					return h, bad(start, fmt.Sprintf("entry field of form %#x truncated or not allowed", form))
				}
				switch lnct {
				case 1: // DW_LNCT_path
					name = l.lineStr(b, start, form, h.offSz, un)
				case 2: // DW_LNCT_directory_index
					dir = l.lineUint(b, start, form)
				}
			}
			if list == 0 {
				h.dirs = append(h.dirs, name)
			} else {
				h.addFile(name, dir)
			}
		}
	}
	return h, nil
}

// listString reads the next string of a DWARF 2-4 header's list (n
// entries so far) at p, "" at the list's end.
func listString(b []byte, p, end, n int, list string) (string, int, error) {
	if p >= end {
		return "", p, &LinesError{"line", uint64(p), "truncated " + list}
	}
	s := cString(b, uint64(p))
	p += len(s) + 1
	if s != "" && n >= maxLineFiles {
		return "", p, &LinesError{"line", uint64(p), "too many entries in " + list}
	}
	return s, p, nil
}

// addFile adds a file to the header's table, its directory resolved.
func (h *lineHeader) addFile(name string, dir uint64) {
	h.files = append(h.files, lineFile{name: name})
	if dir < uint64(len(h.dirs)) {
		h.files[len(h.files)-1].dir = h.dirs[dir]
	}
}

// lineStr is a DW_LNCT_path value of form at p.
func (l *Lines) lineStr(b []byte, p int, form uint64, offSz int, un *lineUnit) string {
	switch form {
	case 0x08: // string
		return cString(b, uint64(p))
	case 0x1f, 0x0e: // line_strp, strp
		name := "line_str"
		if form == 0x0e {
			name = "str"
		}
		sec, _ := l.sec.section(name)
		return cString(sec, l.uintN(b[p:], offSz))
	case 0x1a, 0x25, 0x26, 0x27, 0x28: // strx forms
		r := dieReader{l: l, u: un}
		var v uint64
		switch form {
		case 0x1a:
			v, _, _ = uleb(b, p, len(b))
		default:
			v = l.uintN(b[p:], int(form-0x24))
		}
		return r.str(attrVal{uint16(form), v})
	}
	return ""
}

// lineUint is a DW_LNCT_directory_index value of form at p.
func (l *Lines) lineUint(b []byte, p int, form uint64) uint64 {
	switch form {
	case 0x0b:
		return uint64(b[p])
	case 0x05:
		return l.uintN(b[p:], 2)
	case 0x06:
		return l.uintN(b[p:], 4)
	case 0x07:
		return l.uintN(b[p:], 8)
	case 0x0f:
		v, _, _ := uleb(b, p, len(b))
		return v
	}
	return 1 << 62
}

// path is the file's name as SourceFrame gives it (see cleanFile),
// joined on first use.
func (t *unitTable) path(i int32) string {
	if i < 0 || int(i) >= len(t.files) {
		return ""
	}
	f := &t.files[i]
	if s := f.full.Load(); s != nil {
		return *s
	}
	name := f.name
	if name != "" && name[0] != '/' && f.dir != "" {
		name = path.Join(f.dir, name)
	}
	s := cleanFile(name, t.compDir, t.version)
	f.full.Store(&s)
	return s
}

// runLineProgram runs the program (DWARF 5 §6.2.5) into t's rows, sorted
// by address with each sequence's end first at an address, a row that
// repeats the file and line of the row before it dropped (a lookup
// between them gives the same answer).
//
// Compilers emit each sequence in address order and most units'
// sequences one after the other, so the rows are in the table's order
// as they come: they go straight into t.addrs and t.locs, repeats
// dropped as they come. Of libc6-dbg's units 94 in 2,063 are not (a
// function's cold part, in .text.unlikely, lies below the unit's other
// code); their program is run again, every row kept, sorted and then
// cut of its repeats.
func (l *Lines) runLineProgram(t *unitTable, b []byte, h *lineHeader) error {
	addrs, locs, sorted, err := l.lineRows(b, h, !l.alwaysSort)
	if err != nil {
		return err
	}
	if !sorted || l.alwaysSort {
		if addrs, locs, _, err = l.lineRows(b, h, false); err != nil {
			return err
		}
		sortRows(addrs, locs)
		n := 0
		for i := range addrs {
			if i > 0 && locs[i].line >= 0 && locs[i] == locs[i-1] {
				continue
			}
			addrs[n], locs[n] = addrs[i], locs[i]
			n++
		}
		addrs, locs = addrs[:n], locs[:n]
	}
	t.addrs, t.locs = addrs[:len(addrs):len(addrs)], locs[:len(locs):len(locs)]
	t.bytes += int64(cap(addrs))*8 + int64(cap(locs))*8
	if t.rowIdx = newRowIndex(t.addrs); t.rowIdx != nil {
		t.bytes += int64(len(t.rowIdx.first)) * 4
	}
	return nil
}

// lineRows runs the program into rows in the order they come, the rows
// at a sequence's end address dropped. With dedup, a row whose file and
// line are the last kept row's is dropped too, and sorted reports
// whether the rows came in the table's order; the rows are then the
// table (see runLineProgram: a dropped row repeats the row before it in
// every case where sorted holds).
func (l *Lines) lineRows(b []byte, h *lineHeader, dedup bool) (addrs []uint64, locs []rowLoc, sorted bool, err error) {
	var addr uint64
	file, line, opIndex := int64(1), int64(1), 0
	// A row takes a byte of the program at least; libc6-dbg's units
	// take 4.5 bytes a row, 7.3 a row kept.
	guess := (h.end-h.program)/4 + 16
	if dedup {
		guess = (h.end-h.program)/6 + 16
	}
	addrs = make([]uint64, 0, guess)
	locs = make([]rowLoc, 0, guess)
	sorted = true
	// The last row that came (kept or not): what the order is checked
	// against.
	lastAddr, lastEnd, any := uint64(0), false, false
	seq := 0 // the current sequence's first row
	reset := func() { addr, file, line, opIndex = 0, 1, 1, 0 }
	advance := func(n uint64) {
		oi := uint64(opIndex) + n
		addr += uint64(h.minInst) * (oi / uint64(h.maxOps))
		opIndex = int(oi % uint64(h.maxOps))
	}
	emit := func(end bool) {
		loc := rowLoc{line: int32(line), file: -1}
		if line < 0 || line > 1<<31-1 {
			loc.line = 0
		}
		if end {
			// Rows at the end address cover nothing; dropping them lets
			// a sequence that starts there win.
			for len(addrs) > seq && addrs[len(addrs)-1] >= addr {
				addrs, locs = addrs[:len(addrs)-1], locs[:len(locs)-1]
			}
			// What came before is what is left: a row of this sequence
			// below addr, or the one before the sequence.
			any = len(addrs) > 0
			if any {
				lastAddr, lastEnd = addrs[len(addrs)-1], locs[len(locs)-1].line < 0
			}
			seq = len(addrs) + 1
			loc.line = -1
		} else if file >= 0 && file < int64(len(h.files)) {
			loc.file = int32(file)
		}
		if any && (lastAddr > addr || lastAddr == addr && !lastEnd && end) {
			sorted = false
		}
		any, lastAddr, lastEnd = true, addr, end
		if dedup && !end && len(locs) > 0 && locs[len(locs)-1] == loc {
			return
		}
		addrs = append(addrs, addr)
		locs = append(locs, loc)
	}
	bad := func(p int, msg string) error { return &LinesError{"line", uint64(p), msg} }
	p, end := h.program, h.end
	for p < end {
		op := int(b[p])
		p++
		var ok bool
		switch {
		case op >= h.opBase:
			adj := op - h.opBase
			advance(uint64(adj / h.lineRange))
			line += int64(h.lineBase + adj%h.lineRange)
			emit(false)
		case op == 0: // extended
			n, q, ok := uleb(b, p, end)
			if !ok || n == 0 || n > uint64(end-q) {
				return nil, nil, false, bad(p, "extended opcode past the end of the program")
			}
			p = q
			next := p + int(n)
			switch b[p] {
			case 1: // DW_LNE_end_sequence
				emit(true)
				reset()
			case 2: // DW_LNE_set_address
				if sz := int(n) - 1; sz == 4 || sz == 8 {
					addr, opIndex = l.uintN(b[p+1:], sz), 0
				}
			}
			p = next
		case op == 1: // DW_LNS_copy
			emit(false)
		case op == 2: // DW_LNS_advance_pc
			var v uint64
			if v, p, ok = uleb(b, p, end); !ok {
				return nil, nil, false, bad(p, "truncated DW_LNS_advance_pc")
			}
			advance(v)
		case op == 3: // DW_LNS_advance_line
			var v int64
			if v, p, ok = sleb(b, p, end); !ok {
				return nil, nil, false, bad(p, "truncated DW_LNS_advance_line")
			}
			line += v
		case op == 4: // DW_LNS_set_file
			var v uint64
			if v, p, ok = uleb(b, p, end); !ok {
				return nil, nil, false, bad(p, "truncated DW_LNS_set_file")
			}
			file = int64(min(v, 1<<62))
		case op == 8: // DW_LNS_const_add_pc
			advance(uint64((255 - h.opBase) / h.lineRange))
		case op == 9: // DW_LNS_fixed_advance_pc
			if p+2 > end {
				return nil, nil, false, bad(p, "truncated DW_LNS_fixed_advance_pc")
			}
			addr += uint64(l.order.Uint16(b[p:]))
			opIndex = 0
			p += 2
		default: // the others: skip their LEB128 operands
			for range h.stdLens[op-1] {
				if _, p, ok = uleb(b, p, end); !ok {
					return nil, nil, false, bad(p, "truncated standard opcode")
				}
			}
		}
	}
	return addrs, locs, sorted, nil
}

// sortRows sorts the rows by address, at one address a sequence's end
// first, the others in program order.
func sortRows(addrs []uint64, locs []rowLoc) {
	rows := make([]lineRow, len(addrs))
	for i := range rows {
		rows[i] = lineRow{addrs[i], locs[i].file, locs[i].line}
	}
	slices.SortStableFunc(rows, func(a, b lineRow) int {
		switch {
		case a.addr < b.addr:
			return -1
		case a.addr > b.addr:
			return 1
		case a.line < 0 && b.line >= 0:
			return -1
		case b.line < 0 && a.line >= 0:
			return 1
		}
		return 0
	})
	for i, r := range rows {
		addrs[i], locs[i] = r.addr, rowLoc{r.file, r.line}
	}
}
