package record

import (
	"fmt"

	"github.com/cilium/ebpf"
)

// FilterField is what a filter term compares (enum filter_field of
// trace.c).
type FilterField uint8

const (
	// FilterArg is value Val (an argument, or a uretprobe's return
	// value, value 0) as a signed number.
	FilterArg FilterField = 0
	// FilterStr is value Val read as a pointer to a string.
	FilterStr FilterField = 1
	// FilterPID and FilterTID are the process and thread ids (initial
	// PID namespace).
	FilterPID FilterField = 2
	FilterTID FilterField = 3
	// FilterComm is the thread's command name.
	FilterComm FilterField = 4
)

// FilterOp is a term's comparison (enum filter_op of trace.c). Numbers
// take FilterEQ to FilterGE, strings FilterEQ, FilterNE, FilterPrefix
// and FilterNotPrefix.
type FilterOp uint8

const (
	FilterEQ FilterOp = iota
	FilterNE
	FilterLT
	FilterLE
	FilterGT
	FilterGE
	FilterPrefix
	FilterNotPrefix
)

// MaxFilterTerms is the most terms of a filter (TRACE_MAX_TERMS).
const MaxFilterTerms = 8

// FilterTerm is one comparison of a filter: Field Op Num, or Field Op
// Str for FilterStr and FilterComm. OrAfter ends a group of terms joined
// by && (the groups are joined by ||).
type FilterTerm struct {
	Field   FilterField
	Op      FilterOp
	Val     int
	OrAfter bool
	Num     int64
	Str     string
}

// filterTerm is struct filter_term of trace.c; TermsName is an array of
// MaxFilterTerms of them.
type filterTerm struct {
	Field, Op, Val, OrAfter uint8
	Len                     uint32
	Num                     int64
	Str                     [KeyStrLen]byte
}

// SetFilter makes spec's programs drop, before sending or counting it,
// every hit for which no group of terms (terms up to one with OrAfter,
// joined by &&) holds entirely. A term on a value the hit does not have,
// or whose string cannot be read, does not hold.
func SetFilter(spec *ebpf.CollectionSpec, terms []FilterTerm) error {
	if len(terms) > MaxFilterTerms {
		return fmt.Errorf("record: %d filter terms, at most %d", len(terms), MaxFilterTerms)
	}
	var table [MaxFilterTerms]filterTerm
	for i, t := range terms {
		str := t.Field == FilterStr || t.Field == FilterComm
		switch {
		case t.Field > FilterComm, t.Op > FilterNotPrefix, t.Val < 0 || t.Val >= MaxArgs,
			str && t.Op != FilterEQ && t.Op != FilterNE && t.Op != FilterPrefix && t.Op != FilterNotPrefix,
			!str && t.Op > FilterGE, len(t.Str) >= KeyStrLen:
			return fmt.Errorf("record: filter term %d: %+v", i, t)
		}
		ft := filterTerm{Field: uint8(t.Field), Op: uint8(t.Op), Val: uint8(t.Val), Len: uint32(len(t.Str)), Num: t.Num}
		if t.OrAfter || i == len(terms)-1 {
			ft.OrAfter = 1
		}
		copy(ft.Str[:], t.Str)
		table[i] = ft
	}
	if err := spec.Variables[TermsName].Set(table); err != nil {
		return fmt.Errorf("set %s: %w", TermsName, err)
	}
	if err := spec.Variables[NTermsName].Set(uint32(len(terms))); err != nil {
		return fmt.Errorf("set %s: %w", NTermsName, err)
	}
	return nil
}
