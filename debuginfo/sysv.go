package debuginfo

import (
	"debug/dwarf"
	"debug/elf"
	"strings"
)

// The System V AMD64 psABI's parameter passing (§3.2.3 "Parameter
// Passing"), for the parameters whose DWARF location does not hold at the
// entry (GCC -O0). Each parameter is classified by eightbyte: INTEGER
// (integers, pointers) takes the next of rdi, rsi, rdx, rcx, r8, r9; SSE
// (float, double) the next of xmm0-xmm7; MEMORY (aggregates over 16
// bytes, long double, or when the registers ran out) goes on the stack,
// at CFA+0 for the first, each argument 8-byte aligned (16 for 16-byte
// aligned types). An aggregate of 16 bytes or less takes a register per
// eightbyte, INTEGER if a member in it is, else SSE, unless a member is
// unaligned. A result in MEMORY makes the caller pass its address in rdi
// first. A C++ class its ABI passes by invisible reference is a pointer.
//
// The convention is used only for C and C++ functions of external
// linkage or without DW_AT_abstract_origin: a local function that GCC
// cloned (foo.isra.0, foo.constprop.0) may take fewer or other
// parameters than its source says. A DWARF register location that
// disagrees with the convention turns it off for the whole function.

type abiClass uint8

const (
	classNone abiClass = iota
	classInteger
	classSSE
	classMemory
)

// DWARF numbers (x86-64 psABI, "DWARF Register Number Mapping").
var (
	sysvIntRegs = [...]int{5, 4, 1, 2, 8, 9} // rdi, rsi, rdx, rcx, r8, r9
	sysvSSEBase = 17                         // xmm0
)

const sysvSSERegs = 8

// fromABI fills the unavailable locations of sig's parameters, and the
// results' locations, from the calling convention where it applies.
func (s *Signatures) fromABI(sig *Signature, org []entry) {
	if s.machine == elf.EM_AARCH64 && !sig.Go {
		aapcsResults(sig)
		return
	}
	if s.machine != elf.EM_X86_64 {
		return
	}
	if sig.Go {
		goResults(sig)
		return
	}
	for i := range sig.Results {
		if c := sysvClasses(sig.Results[i].Type); len(c) == 1 {
			switch c[0] {
			case classInteger:
				sig.Results[i].Loc = Location{Pieces: []Piece{{Kind: PieceReg, Reg: 0}}, FromABI: true}
			case classSSE:
				sig.Results[i].Loc = Location{Pieces: []Piece{{Kind: PieceReg, Reg: sysvSSEBase}}, FromABI: true}
			}
		}
	}
	external, _ := first(org, dwarf.AttrExternal).(bool)
	if !external && org[0].Val(dwarf.AttrAbstractOrigin) != nil || sig.Variadic {
		return
	}
	need := false
	for _, p := range sig.Params {
		need = need || !p.Loc.Available()
	}
	if !need {
		return
	}
	var ret *Type
	if len(sig.Results) > 0 {
		ret = &sig.Results[0].Type
	}
	locs, ok := sysvParams(sig.Params, ret)
	if !ok {
		return
	}
	for i, p := range sig.Params {
		// A register DWARF gives at the entry must be the convention's.
		if len(p.Loc.Pieces) == 1 && p.Loc.Pieces[0].Kind == PieceReg {
			if a := locs[i].Pieces; len(a) != 1 || a[0] != p.Loc.Pieces[0] {
				return
			}
		}
	}
	for i := range sig.Params {
		if !sig.Params[i].Loc.Available() && len(locs[i].Pieces) > 0 {
			sig.Params[i].Loc = locs[i]
		}
	}
}

// sysvParams assigns each parameter its location at the entry; false
// when a type cannot be classified (the positions of the ones after it
// would be guesses).
func sysvParams(ps []Param, ret *Type) ([]Location, bool) {
	gi, si := 0, 0
	if ret != nil {
		if c := sysvClasses(*ret); len(c) == 1 && c[0] == classMemory {
			gi = 1 // the result's address, in rdi
		}
	}
	stack := int64(0)
	out := make([]Location, len(ps))
	for i, p := range ps {
		t := p.Type
		var cs []abiClass
		if t.ByReference {
			cs = []abiClass{classInteger}
		} else if cs = sysvClasses(t); cs == nil {
			return nil, false
		}
		ni, ns := 0, 0
		for _, c := range cs {
			switch c {
			case classInteger:
				ni++
			case classSSE:
				ns++
			}
		}
		if cs[0] != classMemory && gi+ni <= len(sysvIntRegs) && si+ns <= sysvSSERegs {
			var pieces []Piece
			for k, c := range cs {
				pc := Piece{Kind: PieceReg}
				if c == classInteger {
					pc.Reg, gi = sysvIntRegs[gi], gi+1
				} else {
					pc.Reg, si = sysvSSEBase+si, si+1
				}
				if len(cs) > 1 {
					pc.Size = min(8, t.Size-int64(k)*8)
				}
				pieces = append(pieces, pc)
			}
			out[i] = Location{Pieces: pieces, FromABI: true}
			continue
		}
		if t.Size <= 0 {
			return nil, false
		}
		if sysvAlign(t) == 16 {
			stack = (stack + 15) &^ 15
		}
		out[i] = Location{Pieces: []Piece{{Kind: PieceStack, Offset: stack}}, FromABI: true}
		stack += (t.Size + 7) &^ 7
	}
	return out, true
}

// sysvClasses classifies t by eightbyte; nil when it cannot.
func sysvClasses(t Type) []abiClass {
	switch t.Kind {
	case KindSigned, KindUnsigned, KindBool, KindPointer, KindString:
		switch {
		case t.Size > 0 && t.Size <= 8:
			return []abiClass{classInteger}
		case t.Size == 16:
			return []abiClass{classInteger, classInteger} // __int128
		}
	case KindFloat:
		switch {
		case t.Size == 4 || t.Size == 8:
			return []abiClass{classSSE}
		case t.Size == 16 && strings.Contains(t.Name, "long double"):
			return []abiClass{classMemory} // X87 and X87UP go in memory
		case t.Size == 16:
			return []abiClass{classSSE} // _Float128: SSE and SSEUP, one register
		}
	case KindStruct, KindArray:
		if t.Size > 16 {
			return []abiClass{classMemory}
		}
		if t.Size <= 0 {
			return nil
		}
		cs := make([]abiClass, (t.Size+7)/8)
		if !sysvMerge(cs, t, 0, 0) {
			return nil
		}
		for i, c := range cs {
			switch c {
			case classMemory:
				return []abiClass{classMemory}
			case classNone:
				cs[i] = classSSE
			}
		}
		return cs
	}
	return nil
}

// sysvMerge merges the classes of t's scalars, at byte off of the
// argument, into cs; false when t cannot be classified.
func sysvMerge(cs []abiClass, t Type, off int64, depth int) bool {
	if depth > maxFieldDepth+2 {
		return false
	}
	switch t.Kind {
	case KindStruct:
		if len(t.Fields) == 0 {
			return t.Size == 0
		}
		for _, f := range t.Fields {
			if f.BitSize == 0 && f.Type.Size > 0 && f.Offset%sysvAlign(f.Type) != 0 {
				mark(cs, off+f.Offset, classMemory) // unaligned member
				continue
			}
			if f.BitSize != 0 {
				mark(cs, off+f.Offset, classInteger)
				continue
			}
			if !sysvMerge(cs, f.Type, off+f.Offset, depth+1) {
				return false
			}
		}
		return true
	case KindArray:
		if t.Elem == nil || t.Elem.Size <= 0 {
			return t.Size == 0
		}
		for o := int64(0); o+t.Elem.Size <= t.Size; o += t.Elem.Size {
			if !sysvMerge(cs, *t.Elem, off+o, depth+1) {
				return false
			}
		}
		return true
	}
	c := sysvClasses(t)
	if len(c) != 1 {
		return false
	}
	mark(cs, off, c[0])
	return true
}

// mark merges class c into the eightbyte holding byte off (psABI
// §3.2.3: MEMORY wins, then INTEGER, then SSE).
func mark(cs []abiClass, off int64, c abiClass) {
	i := off / 8
	if i < 0 || i >= int64(len(cs)) {
		return
	}
	switch {
	case cs[i] == classMemory || c == classMemory:
		cs[i] = classMemory
	case cs[i] == classInteger || c == classInteger:
		cs[i] = classInteger
	case c != classNone:
		cs[i] = c
	}
}

// sysvAlign is t's alignment: a scalar's size, an aggregate's largest
// member's.
func sysvAlign(t Type) int64 {
	switch t.Kind {
	case KindStruct:
		a := int64(1)
		for _, f := range t.Fields {
			a = max(a, sysvAlign(f.Type))
		}
		return a
	case KindArray:
		if t.Elem != nil {
			return sysvAlign(*t.Elem)
		}
	}
	if t.Size >= 1 && t.Size <= 16 && t.Size&(t.Size-1) == 0 {
		return t.Size
	}
	return 1
}

// goResults sets the locations of a Go function's results at its return
// by Go's ABIInternal on amd64 (Go's src/cmd/compile/abi-internal.md):
// integer-like results take RAX, RBX, RCX, RDI, RSI, R8, R9, R10, R11 in
// order, a string two of them. Results of other types end the
// assignment: their locations are left unknown.
func goResults(sig *Signature) {
	regs := [...]int{0, 3, 2, 5, 4, 8, 9, 10, 11}
	next := 0
	for i := range sig.Results {
		t := sig.Results[i].Type
		n := 0
		switch t.Kind {
		case KindSigned, KindUnsigned, KindBool, KindPointer:
			if t.Size <= 8 {
				n = 1
			}
		case KindGoString:
			n = 2
		}
		if n == 0 || next+n > len(regs) {
			return
		}
		var pieces []Piece
		for k := 0; k < n; k++ {
			pc := Piece{Kind: PieceReg, Reg: regs[next+k]}
			if n > 1 {
				pc.Size = 8
			}
			pieces = append(pieces, pc)
		}
		next += n
		sig.Results[i].Loc = Location{Pieces: pieces, FromABI: true}
	}
}

// aapcsResults sets the location of a C function's scalar result at its
// return on AArch64 (AAPCS64 §6.9: an integer or pointer in x0, a
// floating-point value in v0).
func aapcsResults(sig *Signature) {
	for i := range sig.Results {
		t := sig.Results[i].Type
		reg := -1
		switch t.Kind {
		case KindSigned, KindUnsigned, KindBool, KindPointer, KindString:
			if t.Size <= 8 {
				reg = 0 // x0
			}
		case KindFloat:
			if t.Size <= 8 {
				reg = 64 // v0
			}
		}
		if reg >= 0 {
			sig.Results[i].Loc = Location{Pieces: []Piece{{Kind: PieceReg, Reg: reg}}, FromABI: true}
		}
	}
}
