package unwind

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"unsafe"

	"github.com/probekit/probekit/internal/safeelf"
)

// Ceilings on what one object's call-frame information may make us keep.
const (
	// maxCFISection bounds .eh_frame and .debug_frame: libjvm.so's
	// .eh_frame (OpenJDK 25) is 1.8 MB, python3.11's 410 KB.
	maxCFISection = 64 << 20
	// maxStateStack bounds DW_CFA_remember_state nesting: GCC and clang
	// emit one level per epilogue, never nested.
	maxStateStack = 16
	// maxRegister is the highest DWARF register column kept. On x86-64,
	// 0-15 are the general registers and 16 the return address (psABI
	// "DWARF Register Number Mapping"); on arm64, 0-30 are x0-x30 and 31
	// sp (AADWARF64 "DWARF register names"), and this package keeps the
	// pc in 32. Rules for others (SSE, x87, the vector registers) are
	// parsed and dropped.
	maxRegister = 32
)

// Register columns of the x86-64 psABI's DWARF numbering.
const (
	RegRBP = 6
	RegRSP = 7
	RegRA  = 16
)

// Register columns of arm64 (AADWARF64). The CIE's return-address
// column is x30, the link register; RegPC is where an unwind of arm64
// code keeps the instruction pointer, which arm64's CFI has no column
// for.
const (
	RegX29 = 29
	RegX30 = 30
	RegSP  = 31
	RegPC  = 32
)

// Errors.
var (
	// ErrNoCFI: the object has neither .eh_frame nor .debug_frame.
	ErrNoCFI = errors.New("no call-frame information")
	// ErrNoFDE: no FDE covers the address.
	ErrNoFDE = errors.New("no FDE covers the address")
	// ErrUnsupported: the CFI uses something this package does not
	// compute (an opcode, pointer encoding or expression operator).
	ErrUnsupported = errors.New("unsupported call-frame information")
)

// FormatError is corrupt call-frame information: what was wrong, in
// which section, at which offset from the section's start.
type FormatError struct {
	Section string
	Off     uint64
	Msg     string
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("malformed %s at offset %#x: %s", e.Section, e.Off, e.Msg)
}

// RuleKind is how a register of the caller is recovered (DWARF5
// §6.4.1 "Register Rules").
type RuleKind uint8

const (
	// RuleUnspecified: no rule given; for callee-saved registers the
	// value is kept (the same-value convention of GCC's unwinder).
	RuleUnspecified RuleKind = iota
	// RuleUndefined: the value is lost; for the return address it marks
	// the outermost frame (glibc's _start, thread start routines).
	RuleUndefined
	RuleSameValue
	// RuleOffset: saved at CFA+Off.
	RuleOffset
	// RuleValOffset: the value is CFA+Off.
	RuleValOffset
	// RuleRegister: held in register Reg.
	RuleRegister
	// RuleExpression: saved at the address Expr computes.
	RuleExpression
	// RuleValExpression: the value is what Expr computes.
	RuleValExpression
)

// Rule recovers one register of the caller.
type Rule struct {
	Kind RuleKind
	Reg  uint16
	Expr Expr
	Off  int64
}

// CFA is the canonical frame address rule: Reg+Off, or Expr when it is
// set (DW_CFA_def_cfa_expression).
type CFA struct {
	Reg  uint16
	Expr Expr
	Off  int64
}

// Expr locates a DWARF expression in its table's section
// (Table.ExprBytes gives the bytes). It holds no pointer, so a Row,
// copied per frame, is plain memory for the garbage collector.
type Expr struct {
	off, n uint32
	set    bool
}

// Set reports whether the rule has an expression.
func (e Expr) Set() bool { return e.set }

// ExprBytes returns the bytes of an expression of t's rows.
func (t *Table) ExprBytes(e Expr) []byte {
	if !e.set || uint64(e.off)+uint64(e.n) > uint64(len(t.data)) {
		return nil
	}
	return t.data[e.off : e.off+e.n]
}

// exprOf locates b, a sub-slice of t's section bytes, as an Expr: its
// offset is how much shorter its capacity is than the section's.
func (t *Table) exprOf(b []byte) Expr {
	return Expr{off: uint32(cap(t.data) - cap(b)), n: uint32(len(b)), set: true}
}

// Row is the unwind rule of one address: the CFA and a rule per
// register column 0-16.
type Row struct {
	CFA  CFA
	Regs [maxRegister + 1]Rule
	// Signal is set for a signal frame's trampoline (augmentation "S"):
	// its return address is exact, look-ups use it without subtracting 1.
	Signal bool
	// RASigned is set on arm64 where the return address is signed by
	// pointer authentication (DW_CFA_AARCH64_negate_ra_state toggles
	// it): its high bits hold the signature, not address.
	RASigned bool
}

type cie struct {
	codeAlign uint64
	dataAlign int64
	ra        uint64
	enc       byte // FDE pointer encoding ("R"), absptr by default
	signal    bool
	hasAug    bool // augmentation "z": FDEs carry augmentation data
	initial   []byte
	off       uint64

	once   sync.Once // computes row
	row    Row       // after the initial instructions
	rowErr error
}

type fde struct {
	start, end uint64 // link-time addresses
	cie        *cie
	ins        []byte
	off        uint64
}

// Table is the call-frame information of one object: its FDEs sorted by
// address. It keeps the section bytes and 56 bytes per FDE; rows are
// computed by Find on demand.
type Table struct {
	// Machine is the architecture the rules are for: elf.EM_X86_64 or
	// elf.EM_AARCH64.
	Machine elf.Machine
	section string
	data    []byte // the section: rules' expressions point into it
	fdes    []fde
	// Size is the memory the table holds: section bytes plus the index.
	Size int
}

// Len is the number of FDEs.
func (t *Table) Len() int { return len(t.fdes) }

// Load reads the call-frame information of f: .eh_frame (located by its
// section header or, without section headers, by PT_GNU_EH_FRAME's
// .eh_frame_hdr), else .debug_frame. x86-64 and little-endian arm64
// files are accepted.
func Load(f *safeelf.File) (*Table, error) {
	if archOf(f.Machine) == nil || f.Class != elf.ELFCLASS64 || f.ByteOrder != binary.LittleEndian {
		return nil, fmt.Errorf("%v %v %v: %w (x86-64 and little-endian arm64 only)", f.Class, f.Machine, f.ByteOrder, ErrUnsupported)
	}
	if s := f.Section(".eh_frame"); s != nil && s.Type == elf.SHT_PROGBITS && s.Size > 0 {
		data, err := f.ReadAt(s.Offset, s.Size, maxCFISection)
		if err != nil {
			return nil, err
		}
		return ParseMachine(f.Machine, data, s.Addr, false, f.ByteOrder)
	}
	if s := f.Section(".debug_frame"); s != nil && s.Type == elf.SHT_PROGBITS && s.Size > 0 {
		data, err := f.ReadAt(s.Offset, s.Size, maxCFISection)
		if err != nil {
			return nil, err
		}
		return ParseMachine(f.Machine, data, 0, true, f.ByteOrder)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_GNU_EH_FRAME {
			return loadFromHdr(f, p)
		}
	}
	return nil, ErrNoCFI
}

// loadFromHdr finds .eh_frame through .eh_frame_hdr (LSB 5.0 "Exception
// Frames"): version 1, eh_frame_ptr_enc, fde_count_enc, table_enc, then
// the encoded eh_frame_ptr. .eh_frame's size is not recorded: it runs to
// its zero terminator, within the loaded segment holding it.
func loadFromHdr(f *safeelf.File, p safeelf.Prog) (*Table, error) {
	hdr, err := f.ReadAt(p.Off, min(p.Filesz, 16), 16)
	if err != nil {
		return nil, err
	}
	bad := &FormatError{Section: ".eh_frame_hdr", Msg: "short or version not 1"}
	if len(hdr) < 4 || hdr[0] != 1 {
		return nil, bad
	}
	r := reader{b: hdr, off: 4, order: f.ByteOrder, section: ".eh_frame_hdr", base: p.Vaddr}
	ptr, err := r.pointer(hdr[1])
	if err != nil {
		return nil, err
	}
	segs := f.Loads()
	seg := segs.Containing(ptr)
	if seg == nil || ptr-seg.Vaddr >= seg.Filesz {
		return nil, &FormatError{Section: ".eh_frame_hdr", Off: 4, Msg: fmt.Sprintf("eh_frame_ptr %#x not in a loaded segment", ptr)}
	}
	n := min(seg.Filesz-(ptr-seg.Vaddr), maxCFISection)
	data, err := f.ReadAt(seg.Off+(ptr-seg.Vaddr), n, maxCFISection)
	if err != nil {
		return nil, err
	}
	return ParseMachine(f.Machine, data, ptr, false, f.ByteOrder)
}

// Parse reads a .eh_frame (addr: its link-time address, for pc-relative
// pointers) or, with debug set, a .debug_frame section, of x86-64 code.
func Parse(data []byte, addr uint64, debug bool, order binary.ByteOrder) (*Table, error) {
	return ParseMachine(elf.EM_X86_64, data, addr, debug, order)
}

// ParseMachine is Parse for the code of machine m (elf.EM_X86_64 or
// elf.EM_AARCH64).
func ParseMachine(m elf.Machine, data []byte, addr uint64, debug bool, order binary.ByteOrder) (*Table, error) {
	if archOf(m) == nil {
		return nil, fmt.Errorf("%v: %w (x86-64 and arm64 only)", m, ErrUnsupported)
	}
	t := &Table{Machine: m, section: ".eh_frame", data: data}
	if debug {
		t.section = ".debug_frame"
	}
	cies := map[uint64]*cie{}
	for off := uint64(0); off < uint64(len(data)); {
		r := reader{b: data, off: off, order: order, section: t.section, base: addr}
		start := off
		length, err := r.u32()
		if err != nil {
			return nil, err
		}
		if length == 0 {
			if debug {
				off = r.off
				continue
			}
			break // .eh_frame's terminator
		}
		var body uint64
		dwarf64 := length == 0xffffffff
		if dwarf64 {
			l64, err := r.u64()
			if err != nil {
				return nil, err
			}
			body = l64
		} else {
			body = uint64(length)
		}
		end := r.off + body
		if end < r.off || end > uint64(len(data)) {
			return nil, r.errorf(start, "entry of %d bytes runs past the section's end", body)
		}
		idOff := r.off
		var id uint64
		if dwarf64 {
			id, err = r.u64()
		} else {
			var id32 uint32
			id32, err = r.u32()
			id = uint64(id32)
		}
		if err != nil {
			return nil, err
		}
		r.b = data[:end]
		isCIE := (!debug && id == 0) || (debug && (id == 0xffffffff || id == 0xffffffffffffffff))
		if isCIE {
			c, err := parseCIE(&r, debug, start)
			if err != nil {
				return nil, err
			}
			cies[start] = c
		} else {
			// .eh_frame: the CIE pointer counts back from its own
			// field; .debug_frame: from the section's start.
			cieOff := id
			if !debug {
				if id > idOff {
					return nil, r.errorf(start, "CIE pointer %#x before the section", id)
				}
				cieOff = idOff - id
			}
			c := cies[cieOff]
			if c == nil {
				var err error
				if c, err = cieAt(data, cieOff, debug, order, t.section, addr); err != nil {
					return nil, err
				}
				cies[cieOff] = c
			}
			e, err := parseFDE(&r, c, debug, start)
			if err != nil {
				return nil, err
			}
			if e.end > e.start {
				t.fdes = append(t.fdes, e)
			}
		}
		off = end
	}
	slices.SortFunc(t.fdes, func(a, b fde) int {
		switch {
		case a.start < b.start:
			return -1
		case a.start > b.start:
			return 1
		}
		return 0
	})
	t.Size = len(data) + len(t.fdes)*int(unsafe.Sizeof(fde{})) + len(cies)*int(unsafe.Sizeof(cie{}))
	return t, nil
}

// cieAt parses the CIE an FDE points at when it was not seen before it.
func cieAt(data []byte, off uint64, debug bool, order binary.ByteOrder, section string, addr uint64) (*cie, error) {
	r := reader{b: data, off: off, order: order, section: section, base: addr}
	length, err := r.u32()
	if err != nil || length == 0 || length == 0xffffffff {
		return nil, r.errorf(off, "FDE's CIE pointer does not point at a 32-bit CIE")
	}
	end := r.off + uint64(length)
	if end > uint64(len(data)) {
		return nil, r.errorf(off, "CIE runs past the section's end")
	}
	id, err := r.u32()
	if err != nil || (!debug && id != 0) || (debug && id != 0xffffffff) {
		return nil, r.errorf(off, "FDE's CIE pointer points at an FDE")
	}
	r.b = data[:end]
	return parseCIE(&r, debug, off)
}

func parseCIE(r *reader, debug bool, start uint64) (*cie, error) {
	c := &cie{off: start}
	version, err := r.u8()
	if err != nil {
		return nil, err
	}
	if version != 1 && version != 3 && version != 4 {
		return nil, r.errorf(start, "CIE version %d", version)
	}
	aug, err := r.cstring()
	if err != nil {
		return nil, err
	}
	if version == 4 {
		asize, err := r.u8()
		if err != nil {
			return nil, err
		}
		if _, err := r.u8(); err != nil { // segment selector size
			return nil, err
		}
		if asize != 8 {
			return nil, r.errorf(start, "CIE address size %d", asize)
		}
	}
	if c.codeAlign, err = r.uleb(); err != nil {
		return nil, err
	}
	if c.dataAlign, err = r.sleb(); err != nil {
		return nil, err
	}
	if version == 1 {
		b, err := r.u8()
		if err != nil {
			return nil, err
		}
		c.ra = uint64(b)
	} else if c.ra, err = r.uleb(); err != nil {
		return nil, err
	}
	if debug {
		c.enc = 0 // absolute addresses (DWARF5 §6.4.1)
	}
	if len(aug) > 0 {
		if aug[0] != 'z' {
			return nil, fmt.Errorf("%w: CIE at %#x: augmentation %q", ErrUnsupported, start, aug)
		}
		c.hasAug = true
		n, err := r.uleb()
		if err != nil {
			return nil, err
		}
		augEnd := r.off + n
		if augEnd < r.off || augEnd > uint64(len(r.b)) {
			return nil, r.errorf(start, "augmentation data of %d bytes runs past the CIE", n)
		}
		for _, a := range aug[1:] {
			switch a {
			case 'R':
				if c.enc, err = r.u8(); err != nil {
					return nil, err
				}
			case 'L':
				if _, err = r.u8(); err != nil {
					return nil, err
				}
			case 'P':
				enc, err := r.u8()
				if err != nil {
					return nil, err
				}
				// The personality routine is C++ exception handling's:
				// read to be skipped.
				if _, err := r.pointer(enc &^ 0x80); err != nil {
					return nil, err
				}
			case 'S':
				c.signal = true
			case 'B', 'G':
				// arm64: return addresses signed with the B key, and
				// memory-tagged frames. Neither changes the rules read
				// here; the signature is stripped the same way.
			default:
				return nil, fmt.Errorf("%w: CIE at %#x: augmentation %q", ErrUnsupported, start, aug)
			}
		}
		r.off = augEnd
	}
	c.initial = r.b[r.off:]
	return c, nil
}

func parseFDE(r *reader, c *cie, debug bool, start uint64) (fde, error) {
	e := fde{cie: c, off: start}
	var err error
	if e.start, err = r.pointer(c.enc); err != nil {
		return e, err
	}
	// The range has the format of the encoding, never its application.
	rng, err := r.pointer(c.enc & 0x0f)
	if err != nil {
		return e, err
	}
	e.end = e.start + rng
	if e.end < e.start {
		return e, r.errorf(start, "FDE range %#x at %#x wraps", rng, e.start)
	}
	if c.hasAug {
		n, err := r.uleb()
		if err != nil {
			return e, err
		}
		if r.off+n < r.off || r.off+n > uint64(len(r.b)) {
			return e, r.errorf(start, "FDE augmentation data of %d bytes runs past the FDE", n)
		}
		r.off += n
	}
	e.ins = r.b[r.off:]
	return e, nil
}
