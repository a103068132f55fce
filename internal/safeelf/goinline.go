package safeelf

import (
	"debug/elf"
)

// Go's inlined calls, from .gopclntab: the runtime expands them in
// tracebacks (runtime.CallersFrames), from the facts below, all from Go's
// runtime (symtab.go, symtabinl.go, runtime2.go) and internal/abi.
//
//   - pcHeader (Go 1.18+): magic, 2 pad bytes, minLC, ptrSize, then
//     ptrSize words nfunc, nfiles, textStart, funcnameOffset, cuOffset,
//     filetabOffset, pctabOffset, pclnOffset.
//   - The function table at pclnOffset: nfunc+1 pairs of uint32 (entry
//     offset from textStart, offset of the _func from pclnOffset).
//   - _func: entryOff, nameOff, args, deferreturn, pcsp, pcfile, pcln,
//     npcdata, cuOffset (uint32 each), startLine (int32, Go 1.20+),
//     funcID, flag, pad, nfuncdata (a byte each); then npcdata uint32
//     offsets into pctab, then nfuncdata uint32 offsets from
//     moduledata.gofunc (^0: none).
//   - PCDATA_InlTreeIndex = 2: a pc-value table of indexes into the
//     function's inline tree, FUNCDATA_InlTree = 3; -1 means the
//     function's own code.
//   - An inline tree entry (inlinedCall, 16 bytes): funcID byte, 3 pad,
//     nameOff int32 (in funcnametab), parentPc int32 (an instruction at
//     the call site, from the function's entry), startLine int32.
//   - A pc-value table: the value starts at -1 and the pc at the entry;
//     each step adds a zigzag varint to the value and a varint times
//     minLC to the pc; the value holds below the new pc. A zero value
//     delta after the first step ends the table.
//   - moduledata starts with a pointer to the pcHeader; its gofunc field
//     is word 40 (Go 1.20+: pcHeader, six slices, findfunctab, minpc,
//     maxpc, ten section bounds, covctrs, ecovctrs, end, gcdata, gcbss,
//     types, etypes, rodata, gofunc), word 38 in Go 1.18 and 1.19
//     (no covctrs).
const (
	pcdataInlTreeIndex = 2
	funcdataInlTree    = 3
	inlinedCallSize    = 16
	// maxInlineDepth bounds a chain: the Go compiler's inlining budget
	// keeps real chains under ten.
	maxInlineDepth = 64
)

// GoFrame is one frame of a pc's inline chain.
type GoFrame struct {
	// Function is the package-qualified name.
	Function string
	File     string
	Line     int
	// Inlined is set on every frame but the last: the function was
	// inlined into the next frame's.
	Inlined bool
}

// goInline is what the inline trees need, read on first use.
type goInline struct {
	bo       interface{ Uint32([]byte) uint32 }
	ptr      int
	minLC    uint64
	names    []byte // funcnametab
	pctab    []byte
	pcln     []byte // from pclnOffset
	nfunc    int
	is120    bool
	gofunc   uint64
	funcData []byte // the file's bytes from gofunc to the end of its section
}

// inline returns the decoded header facts, or nil when pclntab has no
// inline trees this reader follows (before Go 1.18, or gofunc not found).
func (t *GoTable) inline() *goInline { return t.inl }

// InlineBytes is the size of the inline data kept (the file's bytes from
// go:func.* to the end of its section).
func (t *GoTable) InlineBytes() int64 {
	if t.inl == nil {
		return 0
	}
	return int64(len(t.inl.funcData))
}

// readInline reads what the inline trees need, when GoTable decodes the
// table (the file is not kept).
func (t *GoTable) readInline(f *File, sec *Section) (gi *goInline) {
	defer func() {
		if recover() != nil {
			gi = nil
		}
	}()
	data := t.data
	if len(data) < 8 {
		return nil
	}
	bo := f.ByteOrder
	magic := bo.Uint32(data)
	if magic != magicGo118 && magic != magicGo120 {
		return nil
	}
	ptr := int(data[7])
	word := func(i int) uint64 {
		at := 8 + i*ptr
		if at+ptr > len(data) {
			return 1 << 63
		}
		if ptr == 8 {
			return bo.Uint64(data[at:])
		}
		return uint64(bo.Uint32(data[at:]))
	}
	n := uint64(len(data))
	nfunc, nameOff, pctabOff, pclnOff := word(0), word(3), word(6), word(7)
	if nameOff > n || pctabOff > n || pclnOff > n || nfunc > n/8 {
		return nil
	}
	gi = &goInline{bo: bo, ptr: ptr, minLC: uint64(data[6]), names: data[nameOff:], pctab: data[pctabOff:], pcln: data[pclnOff:], nfunc: int(nfunc), is120: magic == magicGo120}
	if gi.minLC == 0 {
		return nil
	}
	words := 40
	if !gi.is120 {
		words = 38
	}
	gofunc, ok := f.goFuncBase(sec, words)
	if !ok {
		return nil
	}
	gi.gofunc = gofunc
	for i := range f.Sections {
		s := &f.Sections[i]
		if s.Type != elf.SHT_NOBITS && s.Addr <= gofunc && gofunc < s.Addr+s.Size {
			b, err := f.ReadAt(s.Offset+(gofunc-s.Addr), s.Addr+s.Size-gofunc, maxPCLNTab)
			if err != nil {
				return nil
			}
			gi.funcData = b
		}
	}
	if gi.funcData == nil {
		return nil
	}
	return gi
}

// goFuncBase finds moduledata (the word pointing to pclntab, in a
// writable section, or in a PIE the R_*_RELATIVE relocation whose addend
// is pclntab's address) and returns its gofunc word.
func (f *File) goFuncBase(pcln *Section, gofuncWord int) (uint64, bool) {
	ptr := 8
	if f.Class == elf.ELFCLASS32 {
		ptr = 4
	}
	read := func(b []byte) uint64 {
		if ptr == 8 {
			return f.ByteOrder.Uint64(b)
		}
		return uint64(f.ByteOrder.Uint32(b))
	}
	for i := range f.Sections {
		s := &f.Sections[i]
		if s.Type != elf.SHT_PROGBITS || s.Flags&elf.SHF_WRITE == 0 || s.Flags&elf.SHF_ALLOC == 0 {
			continue
		}
		b, err := f.ReadAt(s.Offset, s.Size, maxPCLNTab)
		if err != nil {
			continue
		}
		at := gofuncWord * ptr
		for off := 0; off+at+ptr <= len(b); off += ptr {
			if read(b[off:]) != pcln.Addr {
				continue
			}
			v := read(b[off+at:])
			if v == 0 {
				r, ok, _ := f.relativeAddend(s.Addr + uint64(off+at))
				v = r
				if !ok {
					continue
				}
			}
			if v != 0 {
				return v, true
			}
		}
		// A PIE's moduledata words are 0 in the file, set by relocations.
		if base, ok := f.relocatedWordWithAddend(s, pcln.Addr); ok {
			if v, ok, _ := f.relativeAddend(base + uint64(at)); ok {
				return v, true
			}
		}
	}
	return 0, false
}

// relocatedWordWithAddend finds, in section s, the address of a word an
// R_*_RELATIVE relocation sets to value.
func (f *File) relocatedWordWithAddend(s *Section, value uint64) (at uint64, found bool) {
	f.relativeRelocs(func(off, addend uint64) bool {
		if addend == value && off >= s.Addr && off < s.Addr+s.Size {
			at, found = off, true
		}
		return !found
	})
	return at, found
}

// Frames appends pc's frames to dst, innermost first: a frame per
// inlined call (from the function's inline tree, as runtime.CallersFrames
// expands them), then the function holding pc. Without inline data (or
// for code no inlining touched) that is one frame, LineAt's; nothing
// when no function holds pc.
func (t *GoTable) Frames(dst []GoFrame, pc uint64) (out []GoFrame) {
	n := len(dst)
	defer func() {
		if recover() != nil {
			out = dst[:n]
		}
	}()
	file, line, fn := t.LineAt(pc)
	if fn == "" {
		return dst
	}
	if line <= 0 {
		file, line = "", 0
	}
	gi := t.inline()
	if gi == nil {
		return append(dst, GoFrame{Function: fn, File: file, Line: line})
	}
	fo, entry, ok := gi.funcAt(t.TextStart, pc)
	if !ok {
		return append(dst, GoFrame{Function: fn, File: file, Line: line})
	}
	tree, ok := gi.funcdata(fo, funcdataInlTree)
	idxTab, ok2 := gi.pcdata(fo, pcdataInlTreeIndex)
	if !ok || !ok2 || uint64(tree) >= uint64(len(gi.funcData)) {
		return append(dst, GoFrame{Function: fn, File: file, Line: line})
	}
	for depth := 0; depth < maxInlineDepth; depth++ {
		ix := gi.pcvalue(idxTab, entry, pc)
		if ix < 0 {
			break
		}
		at := uint64(tree) + uint64(ix)*inlinedCallSize
		if at+inlinedCallSize > uint64(len(gi.funcData)) {
			break
		}
		call := gi.funcData[at:]
		name := cstring(gi.names, gi.bo.Uint32(call[4:]))
		parent := int32(gi.bo.Uint32(call[8:]))
		dst = append(dst, GoFrame{Function: name, File: file, Line: line, Inlined: true})
		pc = entry + uint64(int64(parent))
		if file, line, _ = t.LineAt(pc); line <= 0 {
			file, line = "", 0
		}
	}
	return append(dst, GoFrame{Function: fn, File: file, Line: line})
}

// funcAt returns the offset (in pcln) of the _func holding pc and its
// entry.
func (gi *goInline) funcAt(text, pc uint64) (int, uint64, bool) {
	if pc < text || gi.nfunc == 0 || len(gi.pcln) < 8*(gi.nfunc+1) {
		return 0, 0, false
	}
	off := uint32(pc - text)
	if uint64(off) != pc-text {
		return 0, 0, false
	}
	lo, hi := 0, gi.nfunc
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if gi.bo.Uint32(gi.pcln[8*m:]) <= off {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == 0 {
		return 0, 0, false
	}
	k := lo - 1
	fo := int(gi.bo.Uint32(gi.pcln[8*k+4:]))
	if fo+44 > len(gi.pcln) {
		return 0, 0, false
	}
	return fo, text + uint64(gi.bo.Uint32(gi.pcln[fo:])), true
}

func (gi *goInline) funcHeader() int {
	if gi.is120 {
		return 44
	}
	return 40
}

// pcdata returns the pctab offset of the function's table i.
func (gi *goInline) pcdata(fo int, i int) (uint32, bool) {
	np := int(gi.bo.Uint32(gi.pcln[fo+28:]))
	if i >= np {
		return 0, false
	}
	at := fo + gi.funcHeader() + 4*i
	if at+4 > len(gi.pcln) {
		return 0, false
	}
	v := gi.bo.Uint32(gi.pcln[at:])
	return v, v != 0
}

// funcdata returns the offset from gofunc of the function's funcdata i.
func (gi *goInline) funcdata(fo int, i int) (uint32, bool) {
	np := int(gi.bo.Uint32(gi.pcln[fo+28:]))
	nf := int(gi.pcln[fo+gi.funcHeader()-1])
	if i >= nf {
		return 0, false
	}
	at := fo + gi.funcHeader() + 4*np + 4*i
	if at+4 > len(gi.pcln) {
		return 0, false
	}
	v := gi.bo.Uint32(gi.pcln[at:])
	return v, v != ^uint32(0)
}

// pcvalue is the value of the pc-value table at off for target.
func (gi *goInline) pcvalue(off uint32, entry, target uint64) int32 {
	if uint64(off) >= uint64(len(gi.pctab)) {
		return -1
	}
	p := gi.pctab[off:]
	pc, val := entry, int32(-1)
	for first := true; len(p) > 0; first = false {
		uv, n := uvarint(p)
		if n <= 0 || uv == 0 && !first {
			return -1
		}
		p = p[n:]
		val += int32(-(uv & 1) ^ (uv >> 1))
		pd, n := uvarint(p)
		if n <= 0 {
			return -1
		}
		p = p[n:]
		pc += uint64(pd) * gi.minLC
		if target < pc {
			return val
		}
	}
	return -1
}

func uvarint(p []byte) (uint32, int) {
	var v uint32
	for i := 0; i < len(p) && i < 5; i++ {
		v |= uint32(p[i]&0x7f) << (7 * i)
		if p[i]&0x80 == 0 {
			return v, i + 1
		}
	}
	return 0, 0
}
