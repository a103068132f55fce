package unwind

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"sort"
)

// DW_CFA_* opcodes (DWARF5 §6.4.2, §7.24; GNU extensions from GCC's
// dwarf2.def).
const (
	cfaAdvanceLoc       = 0x40 // high 2 bits; low 6 the delta
	cfaOffset           = 0x80 // low 6 the register
	cfaRestore          = 0xc0 // low 6 the register
	cfaNop              = 0x00
	cfaSetLoc           = 0x01
	cfaAdvanceLoc1      = 0x02
	cfaAdvanceLoc2      = 0x03
	cfaAdvanceLoc4      = 0x04
	cfaOffsetExtended   = 0x05
	cfaRestoreExtended  = 0x06
	cfaUndefined        = 0x07
	cfaSameValue        = 0x08
	cfaRegister         = 0x09
	cfaRememberState    = 0x0a
	cfaRestoreState     = 0x0b
	cfaDefCFA           = 0x0c
	cfaDefCFARegister   = 0x0d
	cfaDefCFAOffset     = 0x0e
	cfaDefCFAExpression = 0x0f
	cfaExpression       = 0x10
	cfaOffsetExtendedSF = 0x11
	cfaDefCFASF         = 0x12
	cfaDefCFAOffsetSF   = 0x13
	cfaValOffset        = 0x14
	cfaValOffsetSF      = 0x15
	cfaValExpression    = 0x16
	// cfaAArch64NegateRAState is DW_CFA_AARCH64_negate_ra_state on
	// arm64 (GCC's dwarf2.def reuses SPARC's DW_CFA_GNU_window_save
	// number for it); other machines refuse it.
	cfaAArch64NegateRAState = 0x2d
	cfaGNUArgsSize          = 0x2e
	cfaGNUNegOffsetExtSF    = 0x2f
)

// Find returns the unwind row in effect at pc, a link-time address of
// the object: the CIE's initial instructions, then the FDE's up to pc.
func (t *Table) Find(pc uint64) (Row, error) {
	var row Row
	err := t.find(pc, &row)
	return row, err
}

// find is Find into row, which it overwrites: an unwind reuses one Row
// (33 rules of 40 bytes) rather than copying it per frame.
func (t *Table) find(pc uint64, row *Row) error {
	i := sort.Search(len(t.fdes), func(i int) bool { return t.fdes[i].start > pc }) - 1
	if i < 0 || pc >= t.fdes[i].end {
		return ErrNoFDE
	}
	e := &t.fdes[i]
	initial, err := t.initialRow(e.cie)
	if err != nil {
		return err
	}
	*row = *initial
	m := machine{table: t, cie: e.cie, loc: e.start, target: pc}
	return m.run(e.ins, row, initial, e.off)
}

// initialRow is the row of a CIE's initial instructions, computed on
// first use and kept. They run without an address: GCC and clang put
// no advance there, and one would be ignored.
func (t *Table) initialRow(c *cie) (*Row, error) {
	c.once.Do(func() {
		c.row.Signal = c.signal
		m := machine{table: t, cie: c, target: ^uint64(0)}
		c.rowErr = m.run(c.initial, &c.row, nil, c.off)
	})
	return &c.row, c.rowErr
}

// machine runs CFA instructions up to the row of target.
type machine struct {
	table  *Table
	cie    *cie
	loc    uint64
	target uint64
	stack  []Row
}

// run interprets ins into row; initial is the CIE's row (nil while
// running the CIE itself), which DW_CFA_restore returns to. It stops at
// the first advance past target.
func (m *machine) run(ins []byte, row *Row, initial *Row, entry uint64) error {
	r := reader{b: ins, order: binary.LittleEndian, section: m.table.section}
	set := func(reg uint64, rule Rule) {
		if reg <= maxRegister {
			row.Regs[reg] = rule
		}
	}
	restore := func(reg uint64) {
		if reg > maxRegister {
			return
		}
		if initial != nil {
			row.Regs[reg] = initial.Regs[reg]
		} else {
			row.Regs[reg] = Rule{}
		}
	}
	advance := func(delta uint64) bool {
		m.loc += delta * m.cie.codeAlign
		return m.loc > m.target
	}
	fail := func(at uint64, format string, args ...any) error {
		return &FormatError{Section: m.table.section, Off: entry, Msg: fmt.Sprintf("instruction at +%#x: ", at) + fmt.Sprintf(format, args...)}
	}
	for r.off < uint64(len(ins)) {
		at := r.off
		op, _ := r.u8()
		var err error
		switch op & 0xc0 {
		case cfaAdvanceLoc:
			if advance(uint64(op & 0x3f)) {
				return nil
			}
			continue
		case cfaOffset:
			var n uint64
			if n, err = r.uleb(); err != nil {
				return err
			}
			set(uint64(op&0x3f), Rule{Kind: RuleOffset, Off: int64(n) * m.cie.dataAlign})
			continue
		case cfaRestore:
			restore(uint64(op & 0x3f))
			continue
		}
		switch op {
		case cfaNop:
		case cfaSetLoc:
			if m.cie.enc&0x70 != 0 {
				// The instruction's own address is not tracked here.
				return fmt.Errorf("%w: relative DW_CFA_set_loc in the entry at %s offset %#x", ErrUnsupported, m.table.section, entry)
			}
			var loc uint64
			if loc, err = r.pointer(m.cie.enc); err != nil {
				return err
			}
			if loc < m.loc {
				return fail(at, "DW_CFA_set_loc goes back from %#x to %#x", m.loc, loc)
			}
			m.loc = loc
			if m.loc > m.target {
				return nil
			}
		case cfaAdvanceLoc1, cfaAdvanceLoc2, cfaAdvanceLoc4:
			var d uint64
			switch op {
			case cfaAdvanceLoc1:
				var b uint8
				b, err = r.u8()
				d = uint64(b)
			case cfaAdvanceLoc2:
				var b uint16
				b, err = r.u16()
				d = uint64(b)
			default:
				var b uint32
				b, err = r.u32()
				d = uint64(b)
			}
			if err != nil {
				return err
			}
			if advance(d) {
				return nil
			}
		case cfaOffsetExtended, cfaOffsetExtendedSF, cfaValOffset, cfaValOffsetSF, cfaGNUNegOffsetExtSF:
			reg, err := r.uleb()
			if err != nil {
				return err
			}
			var off int64
			if op == cfaOffsetExtended || op == cfaValOffset {
				var u uint64
				u, err = r.uleb()
				off = int64(u)
			} else {
				off, err = r.sleb()
			}
			if err != nil {
				return err
			}
			kind := RuleOffset
			if op == cfaValOffset || op == cfaValOffsetSF {
				kind = RuleValOffset
			}
			if op == cfaGNUNegOffsetExtSF {
				off = -off
			}
			set(reg, Rule{Kind: kind, Off: off * m.cie.dataAlign})
		case cfaRestoreExtended, cfaUndefined, cfaSameValue:
			reg, err := r.uleb()
			if err != nil {
				return err
			}
			switch op {
			case cfaRestoreExtended:
				restore(reg)
			case cfaUndefined:
				set(reg, Rule{Kind: RuleUndefined})
			default:
				set(reg, Rule{Kind: RuleSameValue})
			}
		case cfaRegister:
			reg, err := r.uleb()
			if err != nil {
				return err
			}
			reg2, err := r.uleb()
			if err != nil {
				return err
			}
			set(reg, Rule{Kind: RuleRegister, Reg: uint16(min(reg2, 0xffff))})
		case cfaRememberState:
			if len(m.stack) >= maxStateStack {
				return fail(at, "DW_CFA_remember_state nested deeper than %d", maxStateStack)
			}
			m.stack = append(m.stack, *row)
		case cfaRestoreState:
			if len(m.stack) == 0 {
				return fail(at, "DW_CFA_restore_state without remember_state")
			}
			// The CFA stays: DWARF5 §6.4.2.4 restores register rules;
			// GCC's unwinder restores the CFA too, and every producer
			// emits the CFA again after it. Restoring both matches GCC.
			*row = m.stack[len(m.stack)-1]
			m.stack = m.stack[:len(m.stack)-1]
		case cfaDefCFA, cfaDefCFASF:
			reg, err := r.uleb()
			if err != nil {
				return err
			}
			off, err := m.cfaOffset(&r, op == cfaDefCFASF)
			if err != nil {
				return err
			}
			row.CFA = CFA{Reg: uint16(min(reg, 0xffff)), Off: off}
		case cfaDefCFARegister:
			reg, err := r.uleb()
			if err != nil {
				return err
			}
			row.CFA.Reg, row.CFA.Expr = uint16(min(reg, 0xffff)), Expr{}
		case cfaDefCFAOffset, cfaDefCFAOffsetSF:
			off, err := m.cfaOffset(&r, op == cfaDefCFAOffsetSF)
			if err != nil {
				return err
			}
			row.CFA.Off = off
		case cfaDefCFAExpression:
			expr, err := r.block()
			if err != nil {
				return err
			}
			row.CFA = CFA{Expr: m.table.exprOf(expr)}
		case cfaExpression, cfaValExpression:
			reg, err := r.uleb()
			if err != nil {
				return err
			}
			expr, err := r.block()
			if err != nil {
				return err
			}
			kind := RuleExpression
			if op == cfaValExpression {
				kind = RuleValExpression
			}
			set(reg, Rule{Kind: kind, Expr: m.table.exprOf(expr)})
		case cfaGNUArgsSize:
			if _, err := r.uleb(); err != nil {
				return err
			}
		case cfaAArch64NegateRAState:
			if m.table.Machine != elf.EM_AARCH64 {
				return fmt.Errorf("%w: DW_CFA opcode %#x in the entry at %s offset %#x", ErrUnsupported, op, m.table.section, entry)
			}
			row.RASigned = !row.RASigned
		default:
			return fmt.Errorf("%w: DW_CFA opcode %#x in the entry at %s offset %#x", ErrUnsupported, op, m.table.section, entry)
		}
	}
	return nil
}

// cfaOffset reads a CFA offset: unsigned and not factored, or, for the
// _sf forms, signed and factored by the data alignment (DWARF5 §6.4.2.2).
func (m *machine) cfaOffset(r *reader, sf bool) (int64, error) {
	if sf {
		off, err := r.sleb()
		return off * m.cie.dataAlign, err
	}
	u, err := r.uleb()
	return int64(u), err
}

// block reads a ULEB128 length and that many bytes.
func (r *reader) block() ([]byte, error) {
	n, err := r.uleb()
	if err != nil {
		return nil, err
	}
	if n > uint64(len(r.b)) || r.off > uint64(len(r.b))-n {
		return nil, r.errorf(r.off, "expression of %d bytes runs past the entry", n)
	}
	b := r.b[r.off : r.off+n]
	r.off += n
	return b, nil
}
