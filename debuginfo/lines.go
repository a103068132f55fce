package debuginfo

import (
	"debug/dwarf"
	"encoding/binary"
	"errors"
	"fmt"
	"path"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/probekit/probekit/internal/safeelf"
)

// DWARF line tables and inlined frames: for a link-time address, the
// function, the source file and line, and a frame per inlined call,
// innermost first, as addr2line -f -i prints them.
//
// Reading is lazy. OpenLines reads the unit headers and each compilation
// unit's first entry (its address ranges), not the units' trees or line
// programs; the first address a unit covers makes it read that unit's
// line table and its tree of functions and inlined calls, kept under
// LinesOptions.MaxBytes.
//
// Go's debug/dwarf reads the units, but says it is not hardened against
// hostile input. Lines wraps every call into it with recover, checks the
// counts of a DWARF 5 line header against the bytes that hold them before
// debug/dwarf allocates by them, and bounds every loop by the bytes of
// the unit it reads, so a malformed unit gives a LinesError and leaves the
// other units usable.
//
// Split DWARF (gcc -gsplit-dwarf): a skeleton unit holds the line table
// and the unit's ranges but no functions, which live in a .dwo file that
// Lines does not read. Its addresses get file and line with no function
// (Function "" in the one frame), and no inlined frames.

// DefaultLinesMaxBytes is the default ceiling of LinesOptions.MaxBytes.
// libc's 2,063 units, all read, take about 30 MiB.
const DefaultLinesMaxBytes = 64 << 20

// LinesOptions configure OpenLines. The zero value is valid.
type LinesOptions struct {
	// MaxBytes bounds the estimated memory of the units' tables read
	// so far (line rows, functions, inlined calls, names); 0 means
	// DefaultLinesMaxBytes. Past it, tables of units not used since the
	// last sweep are dropped and read again when needed. The section
	// bytes given to OpenLines are not counted.
	MaxBytes int64
}

// SourceFrame is one frame of an address's inline chain.
type SourceFrame struct {
	// Function is the function's linkage name (mangled, for C++ and
	// Rust) when DWARF gives one, else its name; "" when no function
	// of the unit covers the address.
	Function string
	// File and Line are the source position: for the innermost frame
	// from the line table at the address, for each outer frame the
	// call site of the inlined call one level in (DW_AT_call_file and
	// DW_AT_call_line). File is cleaned (path.Clean) and joined to the
	// unit's compilation directory when relative; "" and 0 when unknown.
	File string
	Line int
	// Inlined is set on every frame but the last: the function was
	// inlined into the next frame's.
	Inlined bool
	// Entry is, for the last frame, the start of the function's address
	// range holding the address (a function split into hot and cold
	// parts has one per part); 0 for inlined frames and when unknown.
	Entry uint64
}

// LinesError is a malformed DWARF unit: the section and offset of what
// was wrong.
type LinesError struct {
	// Section is the section name without ".debug_" ("info", "line").
	Section string
	// Off is the offset in it.
	Off uint64
	Msg string
}

func (e *LinesError) Error() string {
	return fmt.Sprintf("malformed DWARF at .debug_%s+%#x: %s", e.Section, e.Off, e.Msg)
}

// ErrNoLines is returned by OpenLines for sections without .debug_info.
var ErrNoLines = errors.New("no DWARF (.debug_info)")

// Lines is the DWARF of one file, read lazily. It is safe for concurrent
// use; lookups of units already read take no lock.
type Lines struct {
	d        *dwarf.Data
	order    binary.ByteOrder
	lineSec  []byte
	secBytes int64
	lineSz   int // len of .debug_line
	units    []lineUnit
	ranges   []unitRange // sorted by lo
	max      int64
	total    atomic.Int64
	sweep    sync.Mutex
	hand     int
}

type lineUnit struct {
	off     dwarf.Offset // of the unit's first entry
	start   int          // of the unit's header
	size    int          // bytes of the unit in .debug_info
	version int
	dwarf64 bool // 64-bit DWARF: 8-byte section offsets
	tab     atomic.Pointer[unitTable]
	ref     atomic.Bool
	load    sync.Mutex // one reader of a unit at a time
}

type unitRange struct {
	lo, hi uint64
	unit   int32
}

// maxNameDepth bounds the DW_AT_abstract_origin / DW_AT_specification
// chain followed for a name: a real chain has two links (an inlined
// instance, its abstract instance, the declaration).
const maxNameDepth = 8

// maxDWARFSection bounds one DWARF section read (decompressed) from a
// file. libc's largest, .debug_info, is 5.8 MiB; large C++ programs have
// .debug_info sections of hundreds of MiB.
const maxDWARFSection = 1 << 30

// OpenLinesELF is OpenLines over the DWARF sections of ef (plain, or
// compressed: SHF_COMPRESSED with zlib or zstd, or .zdebug_*). ef is read
// now; the section bytes are kept, the file is not.
func OpenLinesELF(ef *safeelf.File, opts *LinesOptions) (*Lines, error) {
	return OpenLines(func(name string) ([]byte, error) {
		return ef.DebugSection(".debug_"+name, maxDWARFSection)
	}, opts)
}

// SectionBytes is the size of the DWARF sections the Lines keeps.
func (l *Lines) SectionBytes() int64 { return l.secBytes }

// OpenLines reads the unit index of the DWARF sections section returns.
// section is called with names without ".debug_" ("info", "abbrev",
// "line", "str", "line_str", "ranges", "rnglists", "addr",
// "str_offsets", "aranges") and returns the section's uncompressed bytes,
// nil when the file lacks it. The bytes are kept, not copied.
func OpenLines(section func(name string) ([]byte, error), opts *LinesOptions) (l *Lines, err error) {
	sec := map[string][]byte{}
	secBytes := int64(0)
	for _, n := range []string{"info", "abbrev", "line", "str", "line_str", "ranges", "rnglists", "addr", "str_offsets", "aranges"} {
		b, err := section(n)
		if err != nil {
			return nil, fmt.Errorf(".debug_%s: %w", n, err)
		}
		sec[n] = b
		secBytes += int64(len(b))
	}
	if len(sec["info"]) == 0 {
		return nil, ErrNoLines
	}
	defer recoverLines(&err, "info", 0)
	d, err := dwarf.New(sec["abbrev"], nil, nil, sec["info"], sec["line"], nil, sec["ranges"], sec["str"])
	if err != nil {
		return nil, dwarfErr("info", err)
	}
	for _, n := range []string{"addr", "line_str", "str_offsets", "rnglists"} {
		if sec[n] != nil {
			d.AddSection(".debug_"+n, sec[n])
		}
	}
	l = &Lines{d: d, order: d.Reader().ByteOrder(), lineSec: sec["line"], lineSz: len(sec["line"]), max: DefaultLinesMaxBytes}
	l.secBytes = secBytes
	if opts != nil && opts.MaxBytes > 0 {
		l.max = opts.MaxBytes
	}
	if err := l.indexUnits(sec["info"]); err != nil {
		return nil, err
	}
	l.addAranges(sec["aranges"])
	sort.Slice(l.ranges, func(i, j int) bool { return l.ranges[i].lo < l.ranges[j].lo })
	return l, nil
}

// indexUnits finds each unit's first entry from its header (DWARF 5
// §7.5.1) and reads that entry's address ranges.
func (l *Lines) indexUnits(info []byte) error {
	r := l.d.Reader()
	for off := 0; off+4 <= len(info); {
		start := off
		n := uint64(l.order.Uint32(info[off:]))
		hdr, offSz := 4, 4
		if n == 0xffffffff {
			if off+12 > len(info) {
				return &LinesError{"info", uint64(off), "truncated 64-bit unit length"}
			}
			n, hdr, offSz = l.order.Uint64(info[off+4:]), 12, 8
		}
		if n < 2 || n > uint64(len(info)-off-hdr) {
			return &LinesError{"info", uint64(off), fmt.Sprintf("unit length %d past the end of the section", n)}
		}
		end := off + hdr + int(n)
		ver := int(l.order.Uint16(info[off+hdr:]))
		die := off + hdr + 2
		switch {
		case ver >= 2 && ver <= 4:
			die += offSz + 1
		case ver == 5:
			if die >= end {
				return &LinesError{"info", uint64(off), "truncated unit header"}
			}
			ut := info[die]
			die += 2 + offSz
			switch ut {
			case 0x04, 0x05: // DW_UT_skeleton, DW_UT_split_compile: dwo_id
				die += 8
			case 0x02, 0x06: // DW_UT_type, DW_UT_split_type: signature, type offset
				die += 8 + offSz
			}
		default:
			return &LinesError{"info", uint64(off), fmt.Sprintf("unit version %d", ver)}
		}
		off = end
		if die >= end {
			continue
		}
		u := len(l.units)
		l.units = append(l.units, lineUnit{off: dwarf.Offset(die), start: start, size: end - start, version: ver, dwarf64: offSz == 8})
		r.Seek(dwarf.Offset(die))
		e, err := r.Next()
		if err != nil || e == nil {
			continue // its addresses get nothing; the other units still serve
		}
		if e.Tag != dwarf.TagCompileUnit && e.Tag != dwarf.TagSkeletonUnit && e.Tag != dwarf.TagPartialUnit {
			continue
		}
		rs, err := l.d.Ranges(e)
		if err != nil {
			continue
		}
		for _, rg := range rs {
			if rg[1] > rg[0] {
				l.ranges = append(l.ranges, unitRange{rg[0], rg[1], int32(u)})
			}
		}
	}
	return nil
}

// addAranges adds the .debug_aranges ranges (DWARF 5 §6.1.2) of units
// whose first entry gave none: GCC gives every unit DW_AT_ranges or
// low/high pc, other producers may not.
func (l *Lines) addAranges(ar []byte) {
	have := make(map[dwarf.Offset]bool, len(l.units))
	for _, r := range l.ranges {
		have[l.units[r.unit].off] = true
	}
	byStart := map[int]int32{} // unit header offset -> unit
	for i := range l.units {
		if u := &l.units[i]; !have[u.off] {
			byStart[u.start] = int32(i)
		}
	}
	if len(byStart) == 0 {
		return
	}
	for off := 0; off+4 <= len(ar); {
		n := int(l.order.Uint32(ar[off:]))
		hdr, offSz := 4, 4
		if uint32(n) == 0xffffffff {
			return // 64-bit aranges: not produced for the units that need them
		}
		if n < 8 || n > len(ar)-off-hdr {
			return
		}
		set := ar[off+hdr : off+hdr+n]
		off += hdr + n
		infoOff := int(l.order.Uint32(set[2:]))
		asz := int(set[2+offSz])
		if asz != 4 && asz != 8 {
			continue
		}
		u, ok := byStart[infoOff]
		if !ok {
			continue
		}
		// Tuples start at a multiple of twice the address size from
		// the set's start (the unit length included).
		p := hdr + 2 + offSz + 2
		p = (p+2*asz-1)/(2*asz)*(2*asz) - hdr
		for ; p+2*asz <= len(set); p += 2 * asz {
			var a, sz uint64
			if asz == 8 {
				a, sz = l.order.Uint64(set[p:]), l.order.Uint64(set[p+8:])
			} else {
				a, sz = uint64(l.order.Uint32(set[p:])), uint64(l.order.Uint32(set[p+4:]))
			}
			if a == 0 && sz == 0 {
				break
			}
			if a+sz > a {
				l.ranges = append(l.ranges, unitRange{a, a + sz, u})
			}
		}
	}
}

// Frames appends the inline chain of the link-time address pc to dst,
// innermost first, and returns it; dst is returned unchanged when no unit
// covers pc. An error is a malformed unit (the unit's addresses all fail
// with it; it is not read again).
func (l *Lines) Frames(dst []SourceFrame, pc uint64) ([]SourceFrame, error) {
	i := sort.Search(len(l.ranges), func(i int) bool { return l.ranges[i].lo > pc })
	// Unit ranges rarely overlap; a few earlier ones are tried when the
	// nearest does not hold pc.
	for k := i - 1; k >= 0 && k >= i-8; k-- {
		r := l.ranges[k]
		if pc >= r.hi {
			continue
		}
		t, err := l.table(int(r.unit))
		if err != nil {
			return dst, err
		}
		n := len(dst)
		dst = t.frames(dst, pc)
		if len(dst) > n {
			return dst, nil
		}
	}
	// The padding between two functions lies outside every unit's
	// ranges, but its unit's line sequence often covers it: the file
	// and line come from the nearest unit before pc (no function).
	if i > 0 {
		t, err := l.table(int(l.ranges[i-1].unit))
		if err != nil {
			return dst, nil
		}
		if file, line, ok := t.lineAt(pc); ok {
			dst = append(dst, SourceFrame{File: file, Line: line})
		}
	}
	return dst, nil
}

// table returns unit u's tables, reading them on first use.
func (l *Lines) table(u int) (*unitTable, error) {
	un := &l.units[u]
	if t := un.tab.Load(); t != nil {
		if !un.ref.Load() {
			un.ref.Store(true)
		}
		return t, t.err
	}
	un.load.Lock()
	defer un.load.Unlock()
	if t := un.tab.Load(); t != nil {
		return t, t.err
	}
	t := l.readUnit(un)
	l.charge(t.bytes)
	un.ref.Store(true)
	un.tab.Store(t)
	return t, t.err
}

// charge adds n bytes and, past the ceiling, drops the tables of units
// whose reference bit is clear (CLOCK), clearing the bits it passes.
func (l *Lines) charge(n int64) {
	if l.total.Add(n) <= l.max {
		return
	}
	l.sweep.Lock()
	defer l.sweep.Unlock()
	for pass := 0; pass < 2*len(l.units) && l.total.Load() > l.max; pass++ {
		l.hand = (l.hand + 1) % len(l.units)
		un := &l.units[l.hand]
		t := un.tab.Load()
		if t == nil || t.err != nil {
			continue
		}
		if un.ref.Load() {
			un.ref.Store(false)
			continue
		}
		if un.tab.CompareAndSwap(t, nil) {
			l.total.Add(-t.bytes)
		}
	}
}

// MemoryBytes is the estimated memory of the unit tables read and kept.
func (l *Lines) MemoryBytes() int64 { return l.total.Load() }

func recoverLines(err *error, section string, off uint64) {
	if p := recover(); p != nil {
		*err = &LinesError{section, off, fmt.Sprintf("debug/dwarf panicked: %v", p)}
	}
}

// dwarfErr locates a debug/dwarf error.
func dwarfErr(section string, err error) error {
	var de dwarf.DecodeError
	if errors.As(err, &de) {
		return &LinesError{de.Name, uint64(de.Offset), de.Err}
	}
	return &LinesError{section, 0, err.Error()}
}

// cleanFile is a line table's file name as SourceFrame gives it.
// debug/dwarf joins relative names to their directory and, in DWARF 2-4,
// relative directories to the compilation directory; in DWARF 5 the
// directories are taken as given, so a relative result is joined here.
func cleanFile(name, compDir string, version int) string {
	if name == "" {
		return ""
	}
	if version >= 5 && name[0] != '/' && compDir != "" {
		return path.Join(compDir, name)
	}
	return path.Clean(name)
}

// lineRow is one row of a unit's line table; line -1 ends a sequence.
type lineRow struct {
	addr uint64
	file int32
	line int32
}

// unitTable is what one unit's tables give: immutable once read.
type unitTable struct {
	rows  []lineRow // by address; at one address, sequence ends first
	files []string
	// callFiles maps a DW_AT_call_file (an index in the line header's
	// file table) to files; -1 for none.
	callFiles []int32
	funcs     []funcRange // by lo
	nodes     []dieNode   // subprograms and inlined calls, in tree order
	bytes     int64
	err       error
}

type funcRange struct {
	lo, hi uint64
	node   int32
}

// dieNode is a subprogram (parent -1) or an inlined call.
type dieNode struct {
	name     string
	ranges   [][2]uint64
	parent   int32 // the enclosing node for an inlined call, else -1
	end      int32 // index after the node's subtree
	callFile int32
	callLine int32
}

// frames appends pc's chain.
func (t *unitTable) frames(dst []SourceFrame, pc uint64) []SourceFrame {
	file, line, lok := t.lineAt(pc)
	i := sort.Search(len(t.funcs), func(i int) bool { return t.funcs[i].lo > pc })
	fn := int32(-1)
	var entry uint64
	for k := i - 1; k >= 0 && k >= i-16; k-- {
		if f := t.funcs[k]; pc < f.hi {
			// The innermost of nested subprograms (a nested function
			// lies inside its parent's range and comes later).
			if fn < 0 || f.node > fn {
				fn, entry = f.node, f.lo
			}
		}
	}
	if fn < 0 {
		if !lok {
			return dst
		}
		return append(dst, SourceFrame{File: file, Line: line})
	}
	// The chain: each inlined call holding pc whose parent is the
	// previous link. Children follow their parent in tree order.
	var chain [32]int32
	n := 1
	chain[0] = fn
	for j := fn + 1; j < t.nodes[fn].end && n < len(chain); j++ {
		nd := &t.nodes[j]
		if nd.parent == chain[n-1] && holds(nd.ranges, pc) {
			chain[n] = j
			n++
		} else if nd.end > j+1 {
			j = nd.end - 1 // not in this call: skip the calls inside it
		}
	}
	for k := n - 1; k >= 0; k-- {
		nd := &t.nodes[chain[k]]
		f := SourceFrame{Function: nd.name, File: file, Line: line, Inlined: k > 0}
		if k == 0 {
			f.Entry = entry
		}
		dst = append(dst, f)
		file, line = t.callSite(nd.callFile), int(nd.callLine)
	}
	return dst
}

func holds(rs [][2]uint64, pc uint64) bool {
	for _, r := range rs {
		if pc >= r[0] && pc < r[1] {
			return true
		}
	}
	return false
}

func (t *unitTable) file(i int32) string {
	if i < 0 || int(i) >= len(t.files) {
		return ""
	}
	return t.files[i]
}

func (t *unitTable) callSite(i int32) string {
	if i < 0 || int(i) >= len(t.callFiles) {
		return ""
	}
	return t.file(t.callFiles[i])
}

// lineAt is the row holding pc: the last at or before it, unless that
// row ends a sequence.
func (t *unitTable) lineAt(pc uint64) (string, int, bool) {
	i := sort.Search(len(t.rows), func(i int) bool { return t.rows[i].addr > pc })
	if i == 0 || t.rows[i-1].line < 0 {
		return "", 0, false
	}
	r := t.rows[i-1]
	return t.file(r.file), int(r.line), true
}

// readUnit reads unit un's line table and tree. A failure is kept in the
// table (err) so the unit is not read again.
func (l *Lines) readUnit(un *lineUnit) (t *unitTable) {
	t = &unitTable{bytes: 256}
	defer func() {
		if p := recover(); p != nil {
			t = &unitTable{bytes: 256, err: &LinesError{"info", uint64(un.off), fmt.Sprintf("debug/dwarf panicked: %v", p)}}
		}
	}()
	r := l.d.Reader()
	r.Seek(un.off)
	cu, err := r.Next()
	if err != nil || cu == nil {
		t.err = &LinesError{"info", uint64(un.off), fmt.Sprintf("unit entry: %v", err)}
		return t
	}
	if err := l.readLineTable(t, cu, un.version); err != nil {
		t.err = err
		return t
	}
	if err := l.readTree(t, r, un); err != nil {
		t.err = err
		return t
	}
	return t
}

func (l *Lines) readLineTable(t *unitTable, cu *dwarf.Entry, version int) error {
	stmt, ok := cu.Val(dwarf.AttrStmtList).(int64)
	if !ok {
		return nil
	}
	if err := l.checkLineHeader(stmt); err != nil {
		return err
	}
	lr, err := l.d.LineReader(cu)
	if err != nil {
		return dwarfErr("line", err)
	}
	if lr == nil {
		return nil
	}
	compDir, _ := cu.Val(dwarf.AttrCompDir).(string)
	index := map[*dwarf.LineFile]int32{}
	var e dwarf.LineEntry
	seq := 0 // the current sequence's first row
	// Every row takes at least one byte of the program.
	for n := 0; n <= l.lineSz; n++ {
		err := lr.Next(&e)
		if err != nil {
			break // io.EOF, or a malformed program: the rows so far serve
		}
		row := lineRow{addr: e.Address, line: int32(e.Line), file: -1}
		if e.EndSequence {
			// Rows at the end address cover nothing; dropping them lets
			// a sequence that starts there win.
			for len(t.rows) > seq && t.rows[len(t.rows)-1].addr >= e.Address {
				t.rows = t.rows[:len(t.rows)-1]
			}
			seq = len(t.rows) + 1
			row.line = -1
		} else if e.File != nil {
			fi, ok := index[e.File]
			if !ok {
				fi = int32(len(t.files))
				t.files = append(t.files, cleanFile(e.File.Name, compDir, version))
				t.bytes += int64(len(t.files[fi])) + 16
				index[e.File] = fi
			}
			row.file = fi
		}
		t.rows = append(t.rows, row)
	}
	t.bytes += int64(cap(t.rows)) * 16
	slices.SortStableFunc(t.rows, func(a, b lineRow) int {
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
	// Call sites name files by their index in the header's table.
	files := lr.Files()
	t.callFiles = make([]int32, len(files))
	for i, f := range files {
		t.callFiles[i] = -1
		if f == nil {
			continue
		}
		fi, ok := index[f]
		if !ok {
			fi = int32(len(t.files))
			t.files = append(t.files, cleanFile(f.Name, compDir, version))
			t.bytes += int64(len(t.files[fi])) + 16
			index[f] = fi
		}
		t.callFiles[i] = fi
	}
	return nil
}
