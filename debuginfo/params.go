package debuginfo

import (
	"debug/dwarf"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"

	"github.com/probekit/probekit/internal/safeelf"
)

// Signatures: the parameters of a function by name and type, and where
// each is at the function's entry, from DWARF: the DW_TAG_formal_parameter
// children of the subprogram whose entry is the address (DWARF 5 §3.3),
// their types (§5) and their locations (§2.6), through location lists
// where the compiler gave one (GCC -O2 gives one to every parameter; Go
// to every parameter of a function with code).
//
// A location holds at the entry when it is a register (DW_OP_regN), a
// register's entry value (DW_OP_entry_value(DW_OP_regN)
// DW_OP_stack_value, which is that register at the entry by definition),
// or memory at or above the CFA, where the caller put arguments passed
// in memory (DW_OP_fbreg with a frame base of DW_OP_call_frame_cfa, or
// the stack pointer plus an offset). Memory below the CFA is the
// function's own frame, written by its prologue after the entry: GCC -O0
// describes every parameter so (DW_OP_fbreg -20), valid after the
// prologue only. For such a parameter of a C or C++ function on x86-64,
// the location at the entry comes from the System V calling convention
// (Location.FromABI; see sysv.go), which is where the caller put it.

// ErrNoFunction is returned by Signatures.At for an address that is no
// function's entry in the DWARF.
var ErrNoFunction = errors.New("no DWARF function entry at this address")

// Signature is a function as its DWARF describes it.
type Signature struct {
	// Name is the function's name (DW_AT_name), LinkageName its symbol
	// name when DWARF gives one (C++, Rust).
	Name, LinkageName string
	// Entry is the function's entry address (link-time).
	Entry uint64
	// Go is set for a function of a Go unit (DW_LANG_Go).
	Go bool
	// Params are the parameters, in declaration order (a C++ method's
	// this first, Artificial).
	Params []Param
	// Results are the results: for C and C++ one unnamed result of the
	// function's type, none for void; for Go each result (~r0 or its
	// name). A result's Loc is where it is at the return, by the
	// calling convention (FromABI), when known.
	Results []Param
	// Variadic is set for a C function taking "...".
	Variadic bool
}

// Param is one parameter or result.
type Param struct {
	Name string
	Type Type
	// Artificial is set on a parameter the compiler added (C++'s this).
	Artificial bool
	// Loc is where the value is at the function's entry.
	Loc Location
}

// Location is where a value is: one piece for a value in one place, a
// piece per part for a value split over registers (a Go string: pointer
// and length; a small C struct: two eightbytes). No pieces: not
// available.
type Location struct {
	Pieces []Piece
	// FromABI is set when the location comes from the calling
	// convention rather than DWARF (see the package's doc).
	FromABI bool
}

// Available reports whether every piece of the value is somewhere.
func (l Location) Available() bool {
	if len(l.Pieces) == 0 {
		return false
	}
	for _, p := range l.Pieces {
		if p.Kind == PieceNone {
			return false
		}
	}
	return true
}

// Signatures reads the function signatures of one file's DWARF. It is
// safe for concurrent use.
type Signatures struct {
	lines         *Lines
	files         dwarfFiles // debug/dwarf over lines' sections and the supplementary file's
	machine       elf.Machine
	loc, loclists []byte
	addr          []byte

	mu    sync.Mutex
	units map[int]*unitIndex // read so far
}

// maxSignatureEntries bounds the entries of one unit's tree read for
// its index. libc's largest unit has about 60,000 entries.
const maxSignatureEntries = 1 << 20

// maxTypeEntries bounds the type entries read for one parameter.
const maxTypeEntries = 4096

// OpenSignaturesFile opens the signatures of the DWARF of the ELF file r
// (a file with DWARF, or a debug file Find returned), read through
// probekit's hardened ELF reader; r is read now, not kept.
func OpenSignaturesFile(r io.ReaderAt) (s *Signatures, err error) {
	defer safeelf.Recover(&err)
	ef, err := safeelf.NewFile(r)
	if err != nil {
		return nil, fmt.Errorf("debuginfo: %w", err)
	}
	return OpenSignaturesELF(ef)
}

// SignaturesOptions configure OpenSignaturesELFWith. The zero value is
// valid.
type SignaturesOptions struct {
	// Sup is the DWARF of the supplementary file the file's DWARF
	// refers to (dwz's common file: ReadSupLink and FindSup, or
	// OpenSup), opened with OpenLinesELF, as LinesOptions.Sup is; the
	// names and types that DW_FORM_GNU_ref_alt, DW_FORM_ref_sup4/8,
	// DW_FORM_GNU_strp_alt and DW_FORM_strp_sup refer to are read
	// there. Without it such names are "" and such types "?".
	Sup *Lines
}

// OpenSignaturesELF opens the signatures of ef's DWARF (plain or
// compressed sections); ef is read now, the section bytes are kept.
func OpenSignaturesELF(ef *safeelf.File) (*Signatures, error) {
	return OpenSignaturesELFWith(ef, nil)
}

// OpenSignaturesELFWith is OpenSignaturesELF with options (nil for the
// defaults).
func OpenSignaturesELFWith(ef *safeelf.File, opts *SignaturesOptions) (*Signatures, error) {
	return openSignatures(ef.Machine, func(name string) ([]byte, error) {
		return ef.DebugSection(".debug_"+name, maxDWARFSection)
	}, opts)
}

// OpenSignatures opens the signatures of the DWARF sections section
// returns (as OpenLines takes them, plus "loc" and "loclists") for code
// of machine m, which chooses the stack pointer and the calling
// convention.
func OpenSignatures(m elf.Machine, section func(name string) ([]byte, error)) (*Signatures, error) {
	return openSignatures(m, section, nil)
}

func openSignatures(m elf.Machine, section func(name string) ([]byte, error), opts *SignaturesOptions) (*Signatures, error) {
	s := &Signatures{machine: m}
	var lopts *LinesOptions
	if opts != nil && opts.Sup != nil {
		lopts = &LinesOptions{Sup: opts.Sup}
	}
	l, err := OpenLines(func(name string) ([]byte, error) {
		if name == "line" {
			// Line tables: Signatures reads none (libc's .debug_line
			// is 1.3 MB decompressed).
			return nil, nil
		}
		b, err := section(name)
		if name == "addr" {
			s.addr = b
		}
		return b, err
	}, lopts)
	if err != nil {
		return nil, err
	}
	s.lines = l
	if s.files.d, err = l.dwarfData(); err != nil {
		return nil, err
	}
	if sup := l.sup; sup != nil {
		if s.files.sup, err = sup.dwarfData(); err != nil {
			return nil, fmt.Errorf("supplementary file: %w", err)
		}
		if s.files.supStr, err = sup.sec.section("str"); err != nil {
			return nil, fmt.Errorf("supplementary file: %w", err)
		}
	}
	if s.loc, err = section("loc"); err != nil {
		return nil, fmt.Errorf(".debug_loc: %w", err)
	}
	if s.loclists, err = section("loclists"); err != nil {
		return nil, fmt.Errorf(".debug_loclists: %w", err)
	}
	return s, nil
}

// At returns the signature of the function whose entry is the link-time
// address pc: ErrNoFunction when no subprogram starts there, a
// *LinesError when the DWARF is malformed.
func (s *Signatures) At(pc uint64) (sig *Signature, err error) {
	defer recoverLines(&err, "info", 0)
	l := s.lines
	i := sort.Search(len(l.ranges), func(i int) bool { return l.ranges[i].lo > pc })
	tried := map[int32]bool{}
	for k := i - 1; k >= 0 && k >= i-8; k-- {
		r := l.ranges[k]
		if pc >= r.hi || tried[r.unit] {
			continue
		}
		tried[r.unit] = true
		sig, err := s.inUnit(int(r.unit), pc)
		if err != nil || sig != nil {
			return sig, err
		}
	}
	return nil, fmt.Errorf("%w %#x", ErrNoFunction, pc)
}

// unitInfo is what reading a unit's parameters needs from its first
// entry.
type unitInfo struct {
	version  int
	lang     int64
	base     uint64 // DW_AT_low_pc: the base of its location lists
	addrSize int
	offSize  int
	addrBase int64 // DW_AT_addr_base, -1 for none
	locBase  int64 // DW_AT_loclists_base, -1 for none
}

// inUnit finds pc's subprogram in unit u; nil, nil when it has none.
func (s *Signatures) inUnit(u int, pc uint64) (*Signature, error) {
	ix := s.unitIndex(u)
	if ix.err != nil {
		return nil, ix.err
	}
	off, ok := ix.entries[pc]
	if !ok {
		return nil, nil
	}
	r := s.files.d.Reader()
	r.Seek(off)
	e, err := r.Next()
	if err != nil || e == nil {
		return nil, &LinesError{"info", uint64(off), fmt.Sprintf("subprogram entry: %v", err)}
	}
	return s.signature(r, e, ix.ui, pc)
}

// unitIndex is what At needs of one unit: its first entry's facts and
// its subprograms by entry address, read on the unit's first lookup
// (one walk of its tree, instead of one per lookup).
type unitIndex struct {
	ui      unitInfo
	entries map[uint64]dwarf.Offset
	err     error
}

// unitIndex returns unit u's index, reading it the first time.
func (s *Signatures) unitIndex(u int) *unitIndex {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ix, ok := s.units[u]; ok {
		return ix
	}
	ix := s.readIndex(u)
	if s.units == nil {
		s.units = map[int]*unitIndex{}
	}
	s.units[u] = ix
	return ix
}

func (s *Signatures) readIndex(u int) (ix *unitIndex) {
	ix = &unitIndex{entries: map[uint64]dwarf.Offset{}}
	un := &s.lines.units[u]
	defer func() {
		if p := recover(); p != nil {
			ix.err = &LinesError{"info", uint64(dwarf.Offset(un.die)), fmt.Sprintf("debug/dwarf panicked: %v", p)}
		}
	}()
	r := s.files.d.Reader()
	r.Seek(dwarf.Offset(un.die))
	cu, err := r.Next()
	if err != nil || cu == nil {
		ix.err = &LinesError{"info", uint64(dwarf.Offset(un.die)), fmt.Sprintf("unit entry: %v", err)}
		return ix
	}
	ui := unitInfo{version: un.version, addrSize: r.AddressSize(), offSize: 4, addrBase: -1, locBase: -1}
	if un.offSz == 8 {
		ui.offSize = 8
	}
	ui.lang, _ = cu.Val(dwarf.AttrLanguage).(int64)
	ui.base, _ = cu.Val(dwarf.AttrLowpc).(uint64)
	if v, ok := cu.Val(dwarf.AttrAddrBase).(int64); ok {
		ui.addrBase = v
	}
	if v, ok := cu.Val(dwarf.AttrLoclistsBase).(int64); ok {
		ui.locBase = v
	}
	ix.ui = ui
	if !cu.Children {
		return ix
	}
	depth := 0
	// Every entry takes at least one byte (its abbreviation code).
	for n := 0; n <= (un.end-un.start) && n < maxSignatureEntries; n++ {
		e, err := r.Next()
		if err != nil {
			ix.err = dwarfErr("info", err)
			return ix
		}
		if e == nil {
			break
		}
		if e.Tag == 0 {
			if depth--; depth < 0 {
				break
			}
			continue
		}
		if e.Tag == dwarf.TagSubprogram {
			if at, ok := s.entryOf(e); ok {
				if _, dup := ix.entries[at]; !dup {
					ix.entries[at] = e.Offset
				}
			}
		}
		if e.Children {
			depth++
		}
	}
	return ix
}

// entryOf is subprogram e's entry: DW_AT_entry_pc, else DW_AT_low_pc,
// else the start of its first range (GCC lists the range holding the
// entry first when it splits a function into hot and cold parts).
func (s *Signatures) entryOf(e *dwarf.Entry) (uint64, bool) {
	low, hasLow := e.Val(dwarf.AttrLowpc).(uint64)
	switch v := e.Val(dwarf.AttrEntrypc).(type) {
	case uint64:
		return v, true
	case int64:
		if hasLow {
			return low + uint64(v), true
		}
	}
	if hasLow {
		return low, true
	}
	if e.Val(dwarf.AttrRanges) == nil {
		return 0, false
	}
	rs, err := s.files.d.Ranges(e)
	if err != nil || len(rs) == 0 {
		return 0, false
	}
	return rs[0][0], true
}

// origins are e and the entries its DW_AT_abstract_origin and
// DW_AT_specification lead to, where its name and type may be: in the
// file or in its supplementary file (dwz moves the abstract instances
// of inline functions and the declarations there). tr gives the
// readers.
func (s *Signatures) origins(tr *typeReader, e entry) []entry {
	out := []entry{e}
	cur := e
	for depth := 0; depth < maxNameDepth; depth++ {
		at, ok := refAttr(cur, dwarf.AttrAbstractOrigin)
		if !ok {
			if at, ok = refAttr(cur, dwarf.AttrSpecification); !ok {
				break
			}
		}
		nr := tr.reader(at.sup)
		if nr == nil {
			break
		}
		nr.Seek(at.off)
		next, err := nr.Next()
		if err != nil || next == nil || next.Tag == 0 {
			break
		}
		cur = entry{next, at.sup}
		out = append(out, cur)
	}
	return out
}

// first is attribute a of the first of es that has it.
func first(es []entry, a dwarf.Attr) any {
	for _, e := range es {
		if v := e.Val(a); v != nil {
			return v
		}
	}
	return nil
}

// firstStr is string attribute a of the first of es that has it.
func (s *Signatures) firstStr(es []entry, a dwarf.Attr) string {
	for _, e := range es {
		if e.Val(a) != nil {
			v, _ := s.files.str(e, a)
			return v
		}
	}
	return ""
}

// firstRef is reference attribute a of the first of es that has it;
// has is set when one has it, ok when it resolves.
func firstRef(es []entry, a dwarf.Attr) (at ref, has, ok bool) {
	for _, e := range es {
		if e.Val(a) != nil {
			at, ok = refAttr(e, a)
			return at, true, ok
		}
	}
	return ref{}, false, false
}

// signature reads subprogram e, whose children r reads next.
func (s *Signatures) signature(r *dwarf.Reader, e *dwarf.Entry, ui unitInfo, pc uint64) (*Signature, error) {
	tr := &typeReader{files: &s.files, r: s.files.d.Reader(), lang: ui.lang, addrSize: ui.addrSize}
	org := s.origins(tr, entry{e, false})
	sig := &Signature{Entry: pc, Go: ui.lang == langGo}
	sig.Name = s.firstStr(org, dwarf.AttrName)
	sig.LinkageName = s.firstStr(org, dwarf.AttrLinkageName)
	if sig.LinkageName == "" {
		sig.LinkageName = s.firstStr(org, attrMIPSLinkageName)
	}
	fi := entryFrame(s.machine)
	fi.addrSize = ui.addrSize
	lr := &locReader{order: s.lines.order, addrSize: ui.addrSize, base: ui.base}
	if ui.addrBase >= 0 && ui.addrBase <= int64(len(s.addr)) {
		lr.addr = s.addr[ui.addrBase:]
	}
	switch fb := s.entryExpr(e.AttrField(dwarf.AttrFrameBase), lr, ui, pc).(type) {
	case []byte:
		fi.frameBase(fb)
	}
	var kids []*dwarf.Entry
	if e.Children {
		for n := 0; n < maxFields*4; n++ {
			c, err := r.Next()
			if err != nil {
				return nil, dwarfErr("info", err)
			}
			if c == nil || c.Tag == 0 {
				break
			}
			switch c.Tag {
			case dwarf.TagFormalParameter:
				kids = append(kids, c)
			case dwarf.TagUnspecifiedParameters:
				sig.Variadic = true
			}
			if c.Children {
				r.SkipChildren()
			}
		}
	}
	for _, c := range kids {
		po := s.origins(tr, entry{c, false})
		p := Param{}
		p.Name = s.firstStr(po, dwarf.AttrName)
		p.Artificial, _ = first(po, dwarf.AttrArtificial).(bool)
		if at, _, ok := firstRef(po, dwarf.AttrType); ok {
			tr.budget = maxTypeEntries
			p.Type = tr.typeAt(at, 0)
		} else {
			p.Type = Type{Name: "?"}
		}
		if res, _ := c.Val(dwarf.AttrVarParam).(bool); res && sig.Go {
			sig.Results = append(sig.Results, p)
			continue
		}
		switch expr := s.entryExpr(c.AttrField(dwarf.AttrLocation), lr, ui, pc).(type) {
		case []byte:
			p.Loc.Pieces = fi.decodeLoc(expr)
		case locList:
			if reg, ok := expr.entryReg(); ok {
				p.Loc.Pieces = []Piece{{Kind: PieceReg, Reg: reg}}
			}
		}
		sig.Params = append(sig.Params, p)
	}
	if !sig.Go {
		switch at, has, ok := firstRef(org, dwarf.AttrType); {
		case !has: // void
		case ok:
			tr.budget = maxTypeEntries
			sig.Results = []Param{{Type: tr.typeAt(at, 0)}}
		default: // a type unit's: not followed
			sig.Results = []Param{{Type: Type{Name: "?"}}}
		}
	}
	s.fromABI(sig, org)
	return sig, nil
}

// locList is a location list none of whose entries holds at the entry.
type locList []locEntry

// entryReg finds, in a list with no entry for the function's entry, an
// expression DW_OP_entry_value(DW_OP_regN) DW_OP_stack_value: the
// parameter was in register N at the entry.
func (l locList) entryReg() (int, bool) {
	fi := frameInfo{sp: -1}
	for _, e := range l {
		ops := trimNops(e.expr)
		if len(ops) == 0 || ops[0] != locOpEntryValue && ops[0] != locOpGNUEntryVal {
			continue
		}
		if pc := fi.piece(ops); pc.Kind == PieceReg {
			return pc.Reg, true
		}
	}
	return 0, false
}

// entryExpr is the expression of attribute f (DW_AT_location,
// DW_AT_frame_base) at pc: []byte, or locList when it is a list with no
// entry holding pc; nil when there is none.
func (s *Signatures) entryExpr(f *dwarf.Field, lr *locReader, ui unitInfo, pc uint64) any {
	if f == nil {
		return nil
	}
	switch f.Class {
	case dwarf.ClassExprLoc, dwarf.ClassBlock:
		b, _ := f.Val.([]byte)
		return b
	case dwarf.ClassLocListPtr, dwarf.ClassLocList:
		var off int64
		switch v := f.Val.(type) {
		case int64: // DW_FORM_sec_offset (and data4/data8 before DWARF 4)
			off = v
		case uint64: // DW_FORM_loclistx, an index
			if v > 1<<31 {
				return nil
			}
			off = int64(v)
		default:
			return nil
		}
		var es []locEntry
		var err error
		switch {
		case ui.version < 5:
			es, err = lr.readLoc(s.loc, off)
		case f.Class == dwarf.ClassLocList:
			base := ui.locBase
			if base < 0 {
				base = 12 // DWARF 5 §7.29: after a 32-bit list table header
			}
			if off, err = loclistx(s.loclists, s.lines.order, base, uint64(off), ui.offSize); err == nil {
				es, err = lr.readLoclists(s.loclists, off)
			}
		default:
			es, err = lr.readLoclists(s.loclists, off)
		}
		if err != nil && len(es) == 0 {
			return nil
		}
		if expr := locAt(es, pc); expr != nil {
			return expr
		}
		return locList(es)
	}
	return nil
}
