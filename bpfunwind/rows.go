package bpfunwind

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/probekit/probekit/unwind"
)

// Kind is what a row tells the BPF walk to do (PROBEKIT_CFI_* in
// unwind.bpf.h).
type Kind uint8

const (
	// KindRSP: CFA = rsp + CFAOff.
	KindRSP Kind = iota
	// KindRBP: CFA = rbp + CFAOff.
	KindRBP
	// KindPLT: the .plt entries' rule, CFA = rsp + 8, 8 more when
	// (rip & 15) >= CFAOff (the expression GNU ld writes for .plt).
	KindPLT
	// KindFramePointer: no CFI covers the address (a gap between FDEs,
	// the end of the object): the frame record at rbp.
	KindFramePointer
	// KindOutermost: the return address is undefined (_start, thread
	// start routines): the walk ends.
	KindOutermost
	// KindUnsupported: a rule the BPF walk does not compute (a CFA in
	// another register or an expression, a return address not at
	// CFA-8, an FDE whose instructions failed): the walk ends.
	KindUnsupported
	// KindSignal: a signal trampoline ("S" augmentation, CFA =
	// *(rsp+160): glibc's __restore_rt): the interrupted rip, rsp and
	// rbp are in the sigcontext the kernel saved at rsp+40.
	KindSignal
)

var kindNames = [...]string{"rsp", "rbp", "plt", "frame-pointer", "outermost", "unsupported", "signal"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", k)
}

// Row is struct probekit_cfi_row: from link-time address PC to the next
// row's, the CFA rule and where the caller's rbp is saved (RBPOff 8-byte
// words from the CFA; 0: rbp is unchanged). The return address is at
// CFA-8 in every row that goes on (the x86-64 psABI's call).
type Row struct {
	PC     uint32
	CFAOff int16
	Kind   Kind
	RBPOff int8
}

// RowSize is the size of a Row in the BPF map.
const RowSize = 8

// ErrAddressRange: an object's code lies above 4 GiB of link-time
// address, which rows (32-bit) do not reach.
var ErrAddressRange = errors.New("code above 4 GiB of link-time address")

// pltExpr is the .plt FDE's CFA expression, GNU ld's for lazy-binding
// x86-64 entries of 16 bytes: DW_OP_breg7 (rsp) 8, DW_OP_breg16 (rip)
// 0, DW_OP_lit15, DW_OP_and, DW_OP_lit11 (the threshold), DW_OP_ge,
// DW_OP_lit3, DW_OP_shl, DW_OP_plus (DWARF5 §7.7.1 for the opcodes).
// The threshold byte is at pltThreshold.
var pltExpr = []byte{0x77, 0x08, 0x80, 0x00, 0x3f, 0x1a, 0x3b, 0x2a, 0x33, 0x24, 0x22}

const pltThreshold = 6

// sigCFA is a signal trampoline's CFA expression on x86-64 Linux:
// DW_OP_breg7 (rsp) 160, DW_OP_deref: the rsp field of the sigcontext
// at rsp+40 (struct sigcontext, uapi asm/sigcontext.h: rsp at +120),
// glibc's for __restore_rt.
var sigCFA = []byte{0x77, 0xa0, 0x01, 0x06}

// minGap is the smallest gap between FDEs that gets a
// KindFramePointer row: GCC and clang align functions to 16 bytes.
const minGap = 16

// Build turns t's rows into the BPF walk's: one per change of rule, in
// address order, with a KindFramePointer row where a gap of 16 bytes or more between
// FDEs (and the end of the last) begins. Rows equal to the one before are
// dropped. t must be x86-64's.
func Build(t *unwind.Table) ([]Row, error) {
	var (
		rows    []Row
		lastEnd uint64
		err     error
	)
	add := func(at uint64, r Row) {
		r.PC = uint32(at)
		if n := len(rows); n > 0 {
			p := rows[n-1]
			if p.Kind == r.Kind && p.CFAOff == r.CFAOff && p.RBPOff == r.RBPOff {
				return
			}
			if p.PC == r.PC {
				rows[n-1] = r
				return
			}
		}
		rows = append(rows, r)
	}
	t.Spans(func(s unwind.Span) bool {
		// Rows are 32-bit: an FDE may end at 4 GiB, not past it.
		if s.End > 1<<32 {
			err = fmt.Errorf("%w: FDE at %#x to %#x", ErrAddressRange, s.Start, s.End)
			return false
		}
		start := max(s.Start, lastEnd)
		if start >= s.End {
			return true
		}
		// Alignment padding between functions (under 16 bytes) is
		// never a frame's address: no row for it.
		if len(rows) > 0 && start >= lastEnd+minGap {
			add(lastEnd, Row{Kind: KindFramePointer})
		}
		add(start, convert(t, s))
		lastEnd = s.End
		return true
	})
	if err != nil {
		return nil, err
	}
	// The last FDE's end, where frame pointers take over, unless it is
	// 4 GiB itself: uint32 makes that row 0, below every other, and the
	// walk's search would take it for the first row (the BPF side looks
	// up no address at or above 4 GiB in the rows: frame pointers).
	if len(rows) > 0 && lastEnd < 1<<32 {
		add(lastEnd, Row{Kind: KindFramePointer})
	}
	return rows, nil
}

// convert is the BPF row of one span.
func convert(t *unwind.Table, s unwind.Span) Row {
	bad := Row{Kind: KindUnsupported}
	if s.Err != nil {
		return bad
	}
	row := s.Row
	if row.Signal {
		// The CFA is the interrupted rsp, read from the sigcontext:
		// the frame's registers all come from there.
		if row.CFA.Expr.Set() && bytes.Equal(t.ExprBytes(row.CFA.Expr), sigCFA) {
			return Row{Kind: KindSignal}
		}
		return bad
	}
	switch ra := row.Regs[unwind.RegRA]; {
	case ra.Kind == unwind.RuleUndefined:
		return Row{Kind: KindOutermost}
	case ra.Kind != unwind.RuleOffset || ra.Off != -8:
		return bad
	}
	var r Row
	switch {
	case row.CFA.Expr.Set():
		e := t.ExprBytes(row.CFA.Expr)
		if len(e) != len(pltExpr) || !bytes.Equal(e[:pltThreshold], pltExpr[:pltThreshold]) ||
			!bytes.Equal(e[pltThreshold+1:], pltExpr[pltThreshold+1:]) || e[pltThreshold] < 0x30 || e[pltThreshold] > 0x3f {
			return bad
		}
		r = Row{Kind: KindPLT, CFAOff: int16(e[pltThreshold] - 0x30)} // DW_OP_lit0 + n
	case row.CFA.Off < -1<<15 || row.CFA.Off >= 1<<15:
		return bad
	case row.CFA.Reg == unwind.RegRSP:
		r = Row{Kind: KindRSP, CFAOff: int16(row.CFA.Off)}
	case row.CFA.Reg == unwind.RegRBP:
		r = Row{Kind: KindRBP, CFAOff: int16(row.CFA.Off)}
	default:
		return bad
	}
	switch bp := row.Regs[unwind.RegRBP]; bp.Kind {
	case unwind.RuleUnspecified, unwind.RuleSameValue, unwind.RuleUndefined:
	case unwind.RuleOffset:
		if bp.Off%8 != 0 || bp.Off/8 < -128 || bp.Off/8 > 127 || bp.Off == 0 {
			return bad
		}
		r.RBPOff = int8(bp.Off / 8)
	default:
		return bad
	}
	return r
}
