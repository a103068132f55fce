package debuginfo

import (
	"debug/dwarf"
	"encoding/binary"
	"errors"
	"fmt"
	"path"
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
// unit's first entry (its address ranges, found with that one
// abbreviation), not the units' abbreviation tables, trees or line
// programs; the first address a unit covers makes it read that unit's
// line table (a compact row per address, binary-searched) and its tree
// of functions and inlined calls (entries that cannot hold code skipped
// by DW_AT_sibling), kept under LinesOptions.MaxBytes. Names and file
// names share the section bytes; a file's path is joined the first time
// a lookup gives it, so lookups of a unit already read allocate nothing.
//
// The entries and line programs are decoded here (die.go, linetab.go),
// not by Go's debug/dwarf, which decodes every attribute of every entry,
// parses every unit's abbreviations on open, and says it is not hardened
// against hostile input. Every read is bounded by the bytes of its unit
// or section, counts are checked against the bytes that hold them before
// anything is allocated by them, and a malformed unit gives a LinesError
// and leaves the other units usable.
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
	// Sup is the DWARF of the supplementary file the sections refer to
	// (dwz's common file: ReadSupLink, FindSup), opened with
	// OpenLinesELF; its entries and strings give the names that
	// DW_FORM_GNU_ref_alt, DW_FORM_ref_sup4/8, DW_FORM_GNU_strp_alt and
	// DW_FORM_strp_sup refer to. Without it such names are "".
	Sup *Lines
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
	order  binary.ByteOrder
	sec    dwarfSections
	units  []lineUnit
	ranges []unitRange // sorted by lo
	max    int64
	total  atomic.Int64
	sweep  sync.Mutex
	hand   int
	// dwarf is debug/dwarf over the same sections, made on first use
	// (by readers of what Lines does not decode itself).
	dwarf func() (*dwarf.Data, error)
	// alwaysSort makes runLineProgram sort rows already in order (for
	// the test that the two paths agree).
	alwaysSort bool
	// sup is LinesOptions.Sup.
	sup *Lines
}

type lineUnit struct {
	start   int // of the unit's header in .debug_info
	die     int // of the unit's first entry
	end     int // after the unit
	version int
	offSz   int // 4, or 8 in the 64-bit format
	addrSz  int
	abbrOff uint64
	cu      cuInfo
	abbrs   atomic.Pointer[abbrevTable]
	tab     atomic.Pointer[unitTable]
	ref     atomic.Bool
	load    sync.Mutex // one reader of a unit at a time
}

// cuInfo is what a unit's first entry says of the whole unit.
type cuInfo struct {
	ok             bool  // the entry read
	stmtList       int64 // offset in .debug_line, -1 for none
	compDir        string
	base           uint64 // DW_AT_entry_pc, else DW_AT_low_pc: base of range lists
	strOffsetsBase uint64
	addrBase       uint64
	rnglistsBase   uint64
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

// sectionNames are the sections Lines reads, without ".debug_".
var sectionNames = []string{"info", "abbrev", "line", "str", "line_str", "ranges", "rnglists", "addr", "str_offsets", "aranges"}

// OpenLinesELF is OpenLines over the DWARF sections of ef (plain, or
// compressed: SHF_COMPRESSED with zlib or zstd, or .zdebug_*). ef is read
// now: .debug_info on this goroutine and the others on a second one at
// the same time (decompressing libc6-dbg's sections takes 50 ms, 60 % of
// it .debug_info); the section bytes are kept, the file is not.
func OpenLinesELF(ef *safeelf.File, opts *LinesOptions) (*Lines, error) {
	secs := map[string]*lazySection{}
	for _, n := range sectionNames {
		if ef.Section(".debug_"+n) == nil && ef.Section(".zdebug_"+n) == nil {
			continue
		}
		secs[n] = &lazySection{get: func() ([]byte, error) { return ef.DebugSection(".debug_"+n, maxDWARFSection) }}
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		// In the order the unit index needs them.
		for _, n := range []string{"abbrev", "rnglists", "addr", "str_offsets", "str", "line_str", "aranges", "ranges", "line"} {
			if ls := secs[n]; ls != nil {
				ls.bytes()
			}
		}
	})
	l, err := openLines(secs, opts)
	wg.Wait()
	return l, err
}

// SectionBytes is the size of the DWARF sections the Lines keeps
// (decompressed, of those read so far).
func (l *Lines) SectionBytes() int64 {
	n := int64(0)
	for _, ls := range l.sec.lazy {
		if ls.done.Load() {
			n += int64(len(ls.b))
		}
	}
	return n
}

// OpenLines reads the unit index of the DWARF sections section returns.
// section is called with names without ".debug_" ("info", "abbrev",
// "line", "str", "line_str", "ranges", "rnglists", "addr",
// "str_offsets", "aranges"), at most once each, and returns the
// section's uncompressed bytes, nil when the file lacks it; "info" and
// "abbrev" are asked for now, the others when first needed. The bytes
// are kept, not copied.
func OpenLines(section func(name string) ([]byte, error), opts *LinesOptions) (*Lines, error) {
	secs := map[string]*lazySection{}
	for _, n := range sectionNames {
		secs[n] = &lazySection{get: func() ([]byte, error) { return section(n) }}
	}
	return openLines(secs, opts)
}

func openLines(secs map[string]*lazySection, opts *LinesOptions) (l *Lines, err error) {
	l = &Lines{max: DefaultLinesMaxBytes, sec: dwarfSections{lazy: secs}}
	info, err := l.sec.section("info")
	if err != nil {
		return nil, err
	}
	if len(info) == 0 {
		return nil, ErrNoLines
	}
	abbr, err := l.sec.section("abbrev")
	if err != nil {
		return nil, err
	}
	l.sec.info, l.sec.abbrev = info, abbr
	l.dwarf = sync.OnceValues(l.newDwarfData)
	defer recoverLines(&err, "info", 0)
	if opts != nil && opts.MaxBytes > 0 {
		l.max = opts.MaxBytes
	}
	if opts != nil && opts.Sup != nil && opts.Sup != l {
		l.sup = opts.Sup
	}
	if err := l.indexUnits(info); err != nil {
		return nil, err
	}
	if ar, _ := l.sec.section("aranges"); ar != nil {
		l.addAranges(ar)
	}
	sort.Slice(l.ranges, func(i, j int) bool { return l.ranges[i].lo < l.ranges[j].lo })
	return l, nil
}

// attrMIPSLinkageName is DW_AT_MIPS_linkage_name for debug/dwarf users.
const attrMIPSLinkageName = dwarf.Attr(atMIPSLinkageName)

// dwarfData returns debug/dwarf's reader of the sections.
func (l *Lines) dwarfData() (*dwarf.Data, error) { return l.dwarf() }

func (l *Lines) newDwarfData() (d *dwarf.Data, err error) {
	defer recoverLines(&err, "info", 0)
	sec := map[string][]byte{}
	for _, n := range sectionNames {
		if sec[n], err = l.sec.section(n); err != nil {
			return nil, err
		}
	}
	d, err = dwarf.New(sec["abbrev"], nil, nil, sec["info"], sec["line"], nil, sec["ranges"], sec["str"])
	if err != nil {
		return nil, dwarfErr("info", err)
	}
	for _, n := range []string{"addr", "line_str", "str_offsets", "rnglists"} {
		if sec[n] != nil {
			if err := d.AddSection(".debug_"+n, sec[n]); err != nil {
				return nil, dwarfErr(n, err)
			}
		}
	}
	return d, nil
}

// byteOrder guesses the byte order of .debug_info from its first unit's
// version field: a version from 2 to 5 in one order is one of 512 or
// more in the other.
func byteOrder(info []byte) binary.ByteOrder {
	off := 4
	if len(info) >= 4 && binary.LittleEndian.Uint32(info) == 0xffffffff || len(info) >= 4 && binary.BigEndian.Uint32(info) == 0xffffffff {
		off = 12
	}
	if len(info) >= off+2 {
		if v := binary.BigEndian.Uint16(info[off:]); v >= 2 && v <= 5 {
			return binary.BigEndian
		}
	}
	return binary.LittleEndian
}

// indexUnits reads each unit's header (DWARF 5 §7.5.1) and first entry:
// its address ranges and the unit's bases.
func (l *Lines) indexUnits(info []byte) error {
	l.order = byteOrder(info)
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
		var abbrOff uint64
		addrSz := 0
		switch {
		case ver >= 2 && ver <= 4:
			if die+offSz+1 > end {
				return &LinesError{"info", uint64(off), "truncated unit header"}
			}
			abbrOff = l.uintN(info[die:], offSz)
			addrSz = int(info[die+offSz])
			die += offSz + 1
		case ver == 5:
			if die+2+offSz > end {
				return &LinesError{"info", uint64(off), "truncated unit header"}
			}
			ut := info[die]
			addrSz = int(info[die+1])
			abbrOff = l.uintN(info[die+2:], offSz)
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
		if die >= end || (addrSz != 4 && addrSz != 8) {
			continue // its addresses get nothing; the other units still serve
		}
		u := len(l.units)
		l.units = append(l.units, lineUnit{start: start, die: die, end: end, version: ver, offSz: offSz, addrSz: addrSz, abbrOff: abbrOff})
		l.units[u].cu.stmtList = -1
		un := &l.units[u]
		code, _, ok := uleb(info, un.die, un.end)
		if !ok {
			continue
		}
		ab, ok := findAbbrev(l.sec.abbrev, un.abbrOff, code, un)
		if !ok {
			continue
		}
		r := &dieReader{l: l, u: un, one: &ab, oneCode: code, b: info, end: un.end}
		var d dieVals
		if r.decode(un.die, &d) != nil || d.ab == nil {
			continue
		}
		if t := d.ab.tag; t != tagCompileUnit && t != tagSkeletonUnit && t != tagPartialUnit {
			continue
		}
		un.cu = r.cuInfo(&d)
		rs, err := r.ranges(nil, &d)
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

// reader returns a reader of un's entries, its abbreviations read on
// first use.
func (l *Lines) reader(un *lineUnit) (dieReader, error) {
	ab := un.abbrs.Load()
	if ab == nil {
		var err error
		if ab, err = parseAbbrevs(l.sec.abbrev, un.abbrOff, un); err != nil {
			return dieReader{}, err
		}
		un.abbrs.Store(ab)
	}
	return dieReader{l: l, u: un, ab: ab, b: l.sec.info, end: un.end}, nil
}

// cuInfo reads the unit's bases from its first entry d. The bases come
// first: the other attributes' forms may index by them.
func (r *dieReader) cuInfo(d *dieVals) cuInfo {
	c := cuInfo{ok: true, stmtList: -1}
	if v := d.a[slotStrOffsetsBase]; v.form != 0 {
		c.strOffsetsBase = v.v
	}
	if v := d.a[slotAddrBase]; v.form != 0 {
		c.addrBase = v.v
	}
	if v := d.a[slotRnglistsBase]; v.form != 0 {
		c.rnglistsBase = v.v
	}
	r.u.cu = c
	if v := d.a[slotStmtList]; v.form != 0 && v.v < 1<<62 {
		c.stmtList = int64(v.v)
	}
	c.compDir = r.str(d.a[slotCompDir])
	if a, ok := r.addr(d.a[slotEntryPC]); ok {
		c.base = a
	} else if a, ok := r.addr(d.a[slotLowPC]); ok {
		c.base = a
	}
	r.u.cu = c
	return c
}

// addAranges adds the .debug_aranges ranges (DWARF 5 §6.1.2) of units
// whose first entry gave none: GCC gives every unit DW_AT_ranges or
// low/high pc, other producers may not.
func (l *Lines) addAranges(ar []byte) {
	have := make(map[int32]bool, len(l.units))
	for _, r := range l.ranges {
		have[r.unit] = true
	}
	byStart := map[int]int32{} // unit header offset -> unit
	for i := range l.units {
		if !have[int32(i)] {
			byStart[l.units[i].start] = int32(i)
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

// rowLoc is the file and line of a row; line -1 ends a sequence.
type rowLoc struct {
	file, line int32
}

// lineRow is one row of a unit's line table; line -1 ends a sequence.
type lineRow struct {
	addr uint64
	file int32
	line int32
}

// unitTable is what one unit's tables give: immutable once read.
type unitTable struct {
	// addrs and locs are the line table: the row at addrs[i] gives
	// locs[i]; by address, and at one address a sequence's end first.
	addrs []uint64
	locs  []rowLoc
	// rowIdx narrows the search of addrs (nil for a few rows).
	rowIdx *rowIndex
	// files is the line header's file table: rows and DW_AT_call_file
	// index it.
	files   []lineFile
	compDir string
	version int
	funcs   []funcRange // by lo
	nodes   []dieNode   // subprograms and inlined calls, in tree order
	// calls is, by node, what a frame of it prints (apart from nodes,
	// which the search of a chain reads).
	calls []nodeCall
	// more holds the ranges of nodes with more than one.
	more  [][2]uint64
	bytes int64
	err   error
}

type funcRange struct {
	lo, hi uint64
	node   int32
}

// dieNode is a subprogram (parent -1) or an inlined call: what the
// search of an address's chain reads, 32 bytes.
type dieNode struct {
	// lo and hi are the node's one range; with more than one, more
	// is its first in unitTable.more and hi their count.
	lo, hi uint64
	more   bool
	parent int32 // the enclosing node for an inlined call, else -1
	end    int32 // index after the node's subtree
}

// nodeCall is a node's name and, for an inlined call, its call site.
type nodeCall struct {
	name     string
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
		if nd.parent == chain[n-1] && t.holds(nd, pc) {
			chain[n] = j
			n++
		} else if nd.end > j+1 {
			j = nd.end - 1 // not in this call: skip the calls inside it
		}
	}
	for k := n - 1; k >= 0; k-- {
		c := &t.calls[chain[k]]
		f := SourceFrame{Function: c.name, File: file, Line: line, Inlined: k > 0}
		if k == 0 {
			f.Entry = entry
		}
		dst = append(dst, f)
		file, line = t.path(c.callFile), int(c.callLine)
	}
	return dst
}

// holds reports whether one of nd's ranges holds pc.
func (t *unitTable) holds(nd *dieNode, pc uint64) bool {
	if !nd.more {
		return pc >= nd.lo && pc < nd.hi
	}
	for _, r := range t.more[nd.lo : nd.lo+nd.hi] {
		if pc >= r[0] && pc < r[1] {
			return true
		}
	}
	return false
}

// searchAddr is the index of the first of a (ascending) above pc.
func searchAddr(a []uint64, pc uint64) int {
	lo, hi := 0, len(a)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if a[m] <= pc {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// rowIndex cuts a unit's address span into buckets of 1<<shift bytes:
// bucket b starts at lo + b<<shift, and first[b] is the number of rows
// below that start. A row after pc lies in bucket b = (pc-lo)>>shift or
// the one after it, so the search is among first[b]..first[b+1] only: a
// few rows, where a binary search of a large unit (libc's malloc.c has
// 4,000) takes a cache miss at each of its last steps.
type rowIndex struct {
	lo    uint64
	shift uint
	first []uint32
}

// minIndexedRows is the size of a line table below which a binary search
// touches few cache lines and rowIndex is not built.
const minIndexedRows = 64

// newRowIndex indexes addrs (ascending), with about one bucket per two
// rows; nil for a small table.
func newRowIndex(addrs []uint64) *rowIndex {
	n := len(addrs)
	if n < minIndexedRows || n >= 1<<31 {
		return nil
	}
	lo, span := addrs[0], addrs[n-1]-addrs[0]
	shift := uint(0)
	for span>>shift >= uint64(n/2) {
		shift++
	}
	nb := int(span>>shift) + 1 // <= n/2
	x := &rowIndex{lo: lo, shift: shift, first: make([]uint32, nb+1)}
	i := 0
	for b := range x.first {
		start := lo + uint64(b)<<shift
		if b == nb {
			i = n // past the span: every row is below
		}
		for i < n && addrs[i] < start {
			i++
		}
		x.first[b] = uint32(i)
	}
	return x
}

// search is searchAddr(addrs, pc) for the addrs x indexes.
func (x *rowIndex) search(addrs []uint64, pc uint64) int {
	if pc < x.lo {
		return 0
	}
	b := (pc - x.lo) >> x.shift
	if b >= uint64(len(x.first)-1) {
		return len(addrs) // past the last row
	}
	lo, hi := int(x.first[b]), int(x.first[b+1])
	return lo + searchAddr(addrs[lo:hi], pc)
}

// lineAt is the row holding pc: the last at or before it, unless that
// row ends a sequence.
func (t *unitTable) lineAt(pc uint64) (string, int, bool) {
	var i int
	if t.rowIdx != nil {
		i = t.rowIdx.search(t.addrs, pc)
	} else {
		i = searchAddr(t.addrs, pc)
	}
	if i == 0 || t.locs[i-1].line < 0 {
		return "", 0, false
	}
	r := t.locs[i-1]
	return t.path(r.file), int(r.line), true
}

// readUnit reads unit un's line table and tree. A failure is kept in the
// table (err) so the unit is not read again.
func (l *Lines) readUnit(un *lineUnit) (t *unitTable) {
	t = &unitTable{bytes: 256}
	defer func() {
		if p := recover(); p != nil {
			t = &unitTable{bytes: 256, err: &LinesError{"info", uint64(un.die), fmt.Sprintf("reading the unit panicked: %v", p)}}
		}
	}()
	if !un.cu.ok {
		t.err = &LinesError{"info", uint64(un.die), "unit entry does not read"}
		return t
	}
	if un.cu.stmtList >= 0 {
		if err := l.readLineProgram(t, un, un.cu.stmtList); err != nil {
			t.err = err
			return t
		}
	}
	if err := l.readTree(t, un); err != nil {
		t.err = err
		return t
	}
	return t
}
