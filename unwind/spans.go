package unwind

import (
	"debug/elf"

	"github.com/probekit/probekit/internal/safeelf"
)

// Span is one row of a table over the link-time addresses [Start, End)
// it covers, for tables built from a Table's rows (package bpfunwind's).
// Err is set, and Row is not, for an FDE whose instructions could not
// be run (ErrUnsupported, a FormatError): the span is its whole range.
type Span struct {
	Start, End uint64
	Row        *Row
	Err        error
}

// Spans calls yield with each row of each FDE, in address order, until
// it returns false. The Row is reused by the next call: copy what is
// kept.
func (t *Table) Spans(yield func(Span) bool) {
	var row Row
	for i := range t.fdes {
		e := &t.fdes[i]
		for pc := e.start; pc < e.end; {
			next, err := t.rowAt(e, pc, &row)
			if err != nil {
				if !yield(Span{Start: pc, End: e.end, Err: err}) {
					return
				}
				break
			}
			if !yield(Span{Start: pc, End: next, Row: &row}) {
				return
			}
			pc = next
		}
	}
}

// rowAt is find within FDE e, which also returns where the row at pc
// ends: the location of the advance past pc, or the FDE's end.
func (t *Table) rowAt(e *fde, pc uint64, row *Row) (uint64, error) {
	initial, err := t.initialRow(e.cie)
	if err != nil {
		return 0, err
	}
	*row = *initial
	m := machine{table: t, cie: e.cie, loc: e.start, target: pc}
	if err := m.run(e.ins, row, initial, e.off); err != nil {
		return 0, err
	}
	if m.loc > pc && m.loc < e.end {
		return m.loc, nil
	}
	return e.end, nil
}

// Mapping is one executable mapping of a process as ProcessObjects read
// it: the runtime addresses [Start, End), the CFI of the object mapped
// there (nil for none: no CFI, not a file, an unreadable file) and the
// bias added to its link-time addresses (runtime = link-time + Bias).
// Path is the object's, as the process maps it ("" for no file).
type Mapping struct {
	Start, End uint64
	Table      *Table
	Bias       uint64
	Path       string
}

// Mappings returns o's executable mappings, sorted by address.
func (o *ProcessObjects) Mappings() []Mapping {
	out := make([]Mapping, 0, len(o.maps))
	for i := range o.maps {
		m := &o.maps[i]
		bm := Mapping{Start: m.start, End: m.end, Path: m.path}
		if m.t != nil {
			if bias, ok := biasOf(m.segs, m.start, m.end, m.off); ok {
				bm.Table, bm.Bias = m.t, bias
			}
		}
		out = append(out, bm)
	}
	return out
}

// biasOf is the bias of a mapping of file offsets [off, off+end-start)
// at start: through the executable segment whose file image it overlaps
// (vaddr = off - p_offset + p_vaddr, gABI "Program Header").
func biasOf(segs safeelf.Segments, start, end, off uint64) (uint64, bool) {
	for _, p := range segs {
		if p.Flags&elf.PF_X == 0 {
			continue
		}
		if off < p.Off+p.Filesz && p.Off < off+(end-start) {
			return start - off + p.Off - p.Vaddr, true
		}
	}
	return 0, false
}
