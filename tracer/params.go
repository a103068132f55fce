package tracer

import (
	"debug/elf"
	"fmt"
	"math/bits"
	"strconv"
	"strings"

	"github.com/probekit/probekit/debuginfo"
	"github.com/probekit/probekit/internal/jsontext"
	"github.com/probekit/probekit/record"
	"github.com/probekit/probekit/uprobe"
)

// Named arguments: a function probe on a function its DWARF describes
// prints its parameters by name and type,
//
//	PID/TID uprobe:emit @0x12e0 emit(i=0, name="x")
//	PID/TID uretprobe:label @0x1380 = "even"
//
// and --json adds "params": [{"name","type","value"}] beside the raw
// "args" (a uretprobe: "return": {"type","value"} beside "ret"). The BPF
// program sends the registers of the calling convention; a parameter in
// one of them is decoded by its type: integers by size and sign, char
// pointers read as strings (as --str reads them), other pointers in hex,
// a struct pointer with its type, a small struct whose registers were
// sent by its members. A parameter elsewhere (on the stack, in an SSE
// register) is named with its type and marked as not shown. Without
// DWARF the registers print as before.

// maxParamFuncs bounds the functions of one probe whose DWARF is looked
// up: each lookup walks the function's compilation unit, and a glob over
// a whole library (uprobe:libc.so.6:*, about 2,600 functions) would pay
// that for every one before the first hit. Past it, registers print raw.
const maxParamFuncs = 256

// siteParams is how one function probe site prints by DWARF.
type siteParams struct {
	fn     string // the function's DWARF name
	params []paramRead
	ret    *paramRead // for a uretprobe; nil for void
	// strMask is the values read as strings for the parameters.
	strMask uint32
	// regs is the register set the site sends: the one asked for, but
	// Go's argument registers at a Go function's return when its first
	// result takes more than one (Go's ABIInternal returns results in
	// the registers it passes arguments in: a string in rax and rbx).
	regs record.Regs
}

// paramRead is one parameter (or the result): its type and, per piece of
// its location, the index of the value that carries it (-1: not sent).
type paramRead struct {
	name  string
	typ   debuginfo.Type
	avail bool // DWARF (or the convention) says where it is at the entry
	idx   []int
	sizes []int64
}

// regIndex maps a DWARF register to its place in the values of each
// register set trace_func sends (record/trace.c's FUNC_*_REGS).
func regIndex(m elf.Machine, regs record.Regs) map[int]int {
	switch m {
	case elf.EM_X86_64:
		switch regs {
		case record.RegsC: // rdi, rsi, rdx, rcx, r8, r9
			return map[int]int{5: 0, 4: 1, 1: 2, 2: 3, 8: 4, 9: 5}
		case record.RegsGo: // rax, rbx, rcx, rdi, rsi, r8, r9, r10, r11
			return map[int]int{0: 0, 3: 1, 2: 2, 5: 3, 4: 4, 8: 5, 9: 6, 10: 7, 11: 8}
		case record.RegsRet: // rax
			return map[int]int{0: 0}
		}
	case elf.EM_AARCH64:
		switch regs {
		case record.RegsC, record.RegsGo: // x0-x7
			return map[int]int{0: 0, 1: 1, 2: 2, 3: 3, 4: 4, 5: 5, 6: 6, 7: 7}
		case record.RegsRet: // x0
			return map[int]int{0: 0}
		}
	}
	return nil
}

// paramsFor reads fn's signature for a site sending regs; nil when the
// site prints raw values (no DWARF, counting modes, too many functions).
// used is the string mask already taken (--str).
func (t *tracer) paramsFor(b *uprobe.Binary, fn uprobe.Function, kind record.Kind, regs record.Regs, nfuncs int, used uint32) *siteParams {
	if t.cfg.Mode != record.ModeEvents || nfuncs > maxParamFuncs {
		return nil
	}
	sig, err := b.Params(fn)
	if err != nil {
		return nil
	}
	if kind == record.KindUretprobe && sig.Go && len(sig.Results) > 0 && len(sig.Results[0].Loc.Pieces) > 1 {
		regs = record.RegsGo
	}
	index := regIndex(b.Machine(), regs)
	if index == nil {
		return nil
	}
	sp := &siteParams{fn: sig.Name, regs: regs}
	if sp.fn == "" {
		sp.fn = funcName(fn)
	}
	strs := bits.OnesCount32(used)
	read := func(p debuginfo.Param) paramRead {
		pr := paramRead{name: p.Name, typ: p.Type, avail: p.Loc.Available()}
		for _, pc := range p.Loc.Pieces {
			i, ok := index[pc.Reg]
			if pc.Kind != debuginfo.PieceReg || !ok {
				i = -1
			}
			pr.idx = append(pr.idx, i)
			pr.sizes = append(pr.sizes, pc.Size)
		}
		// A C string's pointer, or a Go string's first piece, is read
		// as a string too, while the record has room for one.
		if k := p.Type.Kind; pr.avail && (k == debuginfo.KindString || k == debuginfo.KindGoString) && pr.idx[0] >= 0 {
			if bit := uint32(1) << pr.idx[0]; (used|sp.strMask)&bit == 0 && strs < record.MaxStrs {
				sp.strMask |= bit
				strs++
			}
		}
		return pr
	}
	if kind == record.KindUretprobe {
		if len(sig.Results) > 0 {
			r := read(sig.Results[0])
			sp.ret = &r
		}
		return sp
	}
	for i, p := range sig.Params {
		pr := read(p)
		if pr.name == "" {
			pr.name = "arg" + strconv.Itoa(i+1)
		}
		sp.params = append(sp.params, pr)
	}
	return sp
}

// setParams makes site s print by sp: the text line's values become
// "FUNC(NAME=VALUE, ...)" or a typed return value; the JSON line keeps
// its raw values and adds the named ones.
func (t *tracer) setParams(s *Site, sp *siteParams, addr uint64) {
	s.params = sp
	label := "uprobe"
	if s.Kind == record.KindUretprobe {
		label = "uretprobe"
	}
	switch {
	case t.cfg.JSON:
		s.end = []byte("}\n")
	case s.Kind == record.KindUretprobe:
		s.end = []byte("\n")
	default:
		s.mid = fmt.Appendf(nil, " %s:%s @%#x %s(", label, Escape(s.Function), addr, Escape(sp.fn))
		s.end = []byte(")\n")
	}
}

// appendParams appends the values of a hit of a site that prints by
// DWARF (after site.mid, before site.end).
func (t *tracer) appendParams(b []byte, ev *record.Event, site *Site) []byte {
	sp := site.params
	if t.cfg.JSON {
		n := ev.NArgs
		if site.Kind == record.KindUretprobe {
			n = min(n, 1) // "ret" is the first register, whichever set was sent
		}
		for i := range n {
			if i > 0 {
				b = append(b, ',')
			}
			b = t.appendRaw(b, ev, i)
		}
		if site.Kind == record.KindUretprobe {
			b = append(b, `,"return":`...)
			if sp.ret == nil {
				return append(b, `{"type":"void","value":null}`...)
			}
			b = append(b, `{"type":`...)
			b = jsontext.Append(b, sp.ret.typ.Name, false)
			b = append(b, `,"value":`...)
			return append(appendValue(b, ev, sp.ret, true), '}')
		}
		b = append(b, `],"params":[`...)
		for i := range sp.params {
			p := &sp.params[i]
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"name":`...)
			b = jsontext.Append(b, p.name, false)
			b = append(b, `,"type":`...)
			b = jsontext.Append(b, p.typ.Name, false)
			b = append(b, `,"value":`...)
			b = appendValue(b, ev, p, true)
			if name, ok := p.enumerator(ev); ok {
				b = append(b, `,"enumerator":`...)
				b = jsontext.Append(b, name, false)
			}
			b = append(b, '}')
		}
		return append(b, ']')
	}
	if site.Kind == record.KindUretprobe {
		if sp.ret == nil {
			return append(b, "(void)"...)
		}
		return appendValue(b, ev, sp.ret, false)
	}
	for i := range sp.params {
		p := &sp.params[i]
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, p.name...)
		b = append(b, '=')
		b = appendValue(b, ev, p, false)
	}
	return b
}

// enumerator is the name of p's value in the hit when p is an
// enumeration and the value one of its enumerators.
func (p *paramRead) enumerator(ev *record.Event) (string, bool) {
	if !p.avail || len(p.idx) != 1 || p.idx[0] < 0 || p.idx[0] >= ev.NArgs || p.typ.Size < 1 || p.typ.Size > 8 {
		return "", false
	}
	return enumName(uint64(ev.Args[p.idx[0]]), &p.typ)
}

// appendRaw appends value i as the raw "args" print it: a string only
// for --str.
func (t *tracer) appendRaw(b []byte, ev *record.Event, i int) []byte {
	if t.cfg.strMask&(1<<i) != 0 && strUnreadable(ev, i) {
		return appendUnreadable(b, uint64(ev.Args[i]), true)
	}
	if ev.Errors&(1<<i) != 0 && t.cfg.strMask&(1<<i) != 0 {
		return append(b, "null"...)
	}
	if t.cfg.strMask&(1<<i) != 0 {
		if str, ok := ev.Str(i); ok {
			return jsontext.Append(b, str, false)
		}
	}
	return strconv.AppendInt(b, ev.Args[i], 10)
}

// appendValue appends p's value in the hit by its type; json chooses
// JSON (null for a value not shown, hex pointers as strings) or text
// (<TYPE, not shown>).
func appendValue(b []byte, ev *record.Event, p *paramRead, json bool) []byte {
	notShown := func(why string) []byte {
		if json {
			return append(b, "null"...)
		}
		return fmt.Appendf(b, "<%s, %s>", p.typ.Name, why)
	}
	if !p.avail {
		return notShown("unavailable")
	}
	for _, i := range p.idx {
		if i < 0 || i >= ev.NArgs {
			return notShown("not shown")
		}
	}
	v := uint64(ev.Args[p.idx[0]])
	t := p.typ
	switch t.Kind {
	case debuginfo.KindSigned, debuginfo.KindUnsigned, debuginfo.KindBool:
		if len(p.idx) != 1 || t.Size < 1 || t.Size > 8 {
			return notShown("not shown")
		}
		if name, ok := enumName(v, &t); ok && !json {
			return append(b, name...)
		}
		return appendInt(b, v, t.Kind, t.Size)
	case debuginfo.KindString:
		if str, ok := ev.Str(p.idx[0]); ok && ev.Errors&(1<<p.idx[0]) == 0 {
			return appendStr(b, str, json)
		}
		if strUnreadable(ev, p.idx[0]) {
			return appendUnreadable(b, v, json)
		}
		// NULL, or no room left for another string.
		return appendPtr(b, v, t, json)
	case debuginfo.KindGoString:
		if len(p.idx) != 2 {
			return notShown("not shown")
		}
		n := uint64(ev.Args[p.idx[1]])
		if n == 0 {
			return append(b, `""`...)
		}
		if str, ok := ev.Str(p.idx[0]); ok && ev.Errors&(1<<p.idx[0]) == 0 {
			if uint64(len(str)) >= n {
				return appendStr(b, str[:n], json)
			}
			// Longer than the record's string, or holding a NUL.
			b = appendStr(b, str, json)
			if json {
				return b
			}
			return fmt.Appendf(b, "...(%d bytes)", n)
		}
		if strUnreadable(ev, p.idx[0]) {
			return appendUnreadable(b, uint64(ev.Args[p.idx[0]]), json)
		}
		return notShown("not shown")
	case debuginfo.KindPointer:
		if len(p.idx) != 1 {
			return notShown("not shown")
		}
		return appendPtr(b, v, t, json)
	case debuginfo.KindStruct:
		if s, ok := structValue(ev, p, json); ok {
			return append(b, s...)
		}
	}
	return notShown("not shown")
}

// enumName is the enumerator of t, an enumeration, whose value is v (of
// t.Size bytes, signed or unsigned).
func enumName(v uint64, t *debuginfo.Type) (string, bool) {
	if len(t.Enumerators) == 0 {
		return "", false
	}
	shift := 64 - 8*uint(t.Size)
	n := int64(v << shift >> shift)
	if t.Kind == debuginfo.KindSigned {
		n = int64(v<<shift) >> shift
	}
	return t.EnumName(n)
}

// appendInt appends v, of size bytes, signed or unsigned.
func appendInt(b []byte, v uint64, kind debuginfo.TypeKind, size int64) []byte {
	shift := 64 - 8*uint(size)
	switch kind {
	case debuginfo.KindSigned:
		return strconv.AppendInt(b, int64(v<<shift)>>shift, 10)
	case debuginfo.KindBool:
		return strconv.AppendBool(b, v<<shift != 0)
	}
	return strconv.AppendUint(b, v<<shift>>shift, 10)
}

// appendPtr appends a pointer in hex; a pointer to a struct, union or
// class carries its type in text.
func appendPtr(b []byte, v uint64, t debuginfo.Type, json bool) []byte {
	if json {
		return fmt.Appendf(b, `"%#x"`, v)
	}
	if t.Elem != nil && t.Elem.Kind == debuginfo.KindStruct {
		return fmt.Appendf(b, "(%s)%#x", t.Name, v)
	}
	return fmt.Appendf(b, "%#x", v)
}

// structValue decodes a struct passed in registers that the hit carries
// (a piece per eightbyte, little-endian: the machines whose registers
// trace_func sends): {x=3, y=-4}, in JSON {"x":3,"y":-4}. false when a
// member is not a scalar.
func structValue(ev *record.Event, p *paramRead, json bool) (string, bool) {
	ms, ok := structMembers(ev, p)
	if !ok {
		return "", false
	}
	var sb strings.Builder
	sb.WriteByte('{')
	for k, m := range ms {
		switch {
		case k > 0 && json:
			sb.WriteByte(',')
		case k > 0:
			sb.WriteString(", ")
		}
		if json {
			sb.Write(jsontext.Append(nil, m.Name, false))
			sb.WriteByte(':')
		} else {
			sb.WriteString(m.Name)
			sb.WriteByte('=')
		}
		sb.WriteString(m.Text)
	}
	sb.WriteByte('}')
	return sb.String(), true
}

// structMembers decodes the members of a struct passed in registers
// that the hit carries (see structValue); false when one is not a
// scalar or the registers do not hold the whole struct.
func structMembers(ev *record.Event, p *paramRead) ([]Param, bool) {
	t := p.typ
	if t.Size <= 0 || t.Size > 16 || len(t.Fields) == 0 {
		return nil, false
	}
	var raw [16]byte
	off := int64(0)
	for k, i := range p.idx {
		size := p.sizes[k]
		if size == 0 {
			size = t.Size
		}
		if size > 8 || off+size > 16 {
			return nil, false
		}
		v := uint64(ev.Args[i])
		for j := int64(0); j < size; j++ {
			raw[off+j] = byte(v >> (8 * j))
		}
		off += size
	}
	if off < t.Size {
		return nil, false
	}
	ms := make([]Param, 0, len(t.Fields))
	for _, f := range t.Fields {
		ft := f.Type
		if f.BitSize != 0 || ft.Size < 1 || ft.Size > 8 || f.Offset+ft.Size > t.Size {
			return nil, false
		}
		var v uint64
		for j := ft.Size - 1; j >= 0; j-- {
			v = v<<8 | uint64(raw[f.Offset+j])
		}
		m := Param{Name: f.Name, Type: ft}
		switch ft.Kind {
		case debuginfo.KindSigned, debuginfo.KindUnsigned, debuginfo.KindBool:
			m.Value = intValue(v, ft.Kind, ft.Size)
			m.Text = string(appendInt(nil, v, ft.Kind, ft.Size))
		case debuginfo.KindPointer, debuginfo.KindString:
			m.Value = v
			m.Text = string(appendPtr(nil, v, debuginfo.Type{}, false))
		default:
			return nil, false
		}
		ms = append(ms, m)
	}
	return ms, true
}

// Param is a value of a hit named by its function's DWARF: a parameter
// at a uprobe, the result at a uretprobe, or a member of a struct
// passed by value.
type Param struct {
	// Name is the parameter's name: "argN" (from 1) for one DWARF gives
	// no name, "" for a result.
	Name string
	// Type is its type, from DWARF.
	Type debuginfo.Type
	// Value is the value in the hit, by Type.Kind:
	//	KindSigned              int64 (sign-extended from Type.Size)
	//	KindUnsigned            uint64
	//	KindBool                bool
	//	KindPointer             uint64, the address
	//	KindString              string as read (up to the record's
	//	                        string size); Unreadable for memory
	//	                        the program could not read; uint64,
	//	                        the address, for NULL or a string the
	//	                        record had no room for
	//	KindGoString            string, cut to its length; Unreadable
	//	KindStruct              []Param, its members, for a struct
	//	                        passed in the registers the hit carries
	// nil when the hit does not carry it: a value on the stack, in a
	// floating-point register, or a struct passed in memory.
	Value any
	// Text is the value as the trace's text line prints it (emit(i=0,
	// name="x") prints 0 and "x"; an enumeration prints the
	// enumerator's name; a value not carried "<TYPE, not shown>").
	Text string
}

// Params returns the hit's values named by its function's DWARF, the
// ones the text line prints as FUNC(NAME=VALUE, ...): the parameters at
// a uprobe, the one result at a uretprobe (none for a void function).
// nil for a site that prints raw values: a USDT probe, a function
// without DWARF, a glob over more functions than are looked up.
func (h *Hit) Params() []Param {
	sp := h.Site.params
	if sp == nil {
		return nil
	}
	if h.Site.Kind == record.KindUretprobe {
		if sp.ret == nil {
			return nil
		}
		return []Param{hitParam(h.Event, sp.ret)}
	}
	out := make([]Param, len(sp.params))
	for i := range sp.params {
		out[i] = hitParam(h.Event, &sp.params[i])
	}
	return out
}

// hitParam is p's value in ev.
func hitParam(ev *record.Event, p *paramRead) Param {
	return Param{Name: p.name, Type: p.typ, Value: paramValue(ev, p), Text: string(appendValue(nil, ev, p, false))}
}

// paramValue is p's value in ev as Param.Value holds it.
func paramValue(ev *record.Event, p *paramRead) any {
	if !p.avail || len(p.idx) == 0 {
		return nil
	}
	for _, i := range p.idx {
		if i < 0 || i >= ev.NArgs {
			return nil
		}
	}
	v := uint64(ev.Args[p.idx[0]])
	t := p.typ
	switch t.Kind {
	case debuginfo.KindSigned, debuginfo.KindUnsigned, debuginfo.KindBool:
		if len(p.idx) == 1 && t.Size >= 1 && t.Size <= 8 {
			return intValue(v, t.Kind, t.Size)
		}
	case debuginfo.KindString:
		if str, ok := ev.Str(p.idx[0]); ok && ev.Errors&(1<<p.idx[0]) == 0 {
			return string(str) // a copy: the event's bytes are reused
		}
		if strUnreadable(ev, p.idx[0]) {
			return Unreadable{Address: v, Reason: NotResident}
		}
		return v
	case debuginfo.KindGoString:
		if len(p.idx) != 2 {
			return nil
		}
		n := uint64(ev.Args[p.idx[1]])
		if n == 0 {
			return ""
		}
		if str, ok := ev.Str(p.idx[0]); ok && ev.Errors&(1<<p.idx[0]) == 0 {
			return string(str[:min(uint64(len(str)), n)])
		}
		if strUnreadable(ev, p.idx[0]) {
			return Unreadable{Address: uint64(ev.Args[p.idx[0]]), Reason: NotResident}
		}
	case debuginfo.KindPointer:
		if len(p.idx) == 1 {
			return v
		}
	case debuginfo.KindStruct:
		if ms, ok := structMembers(ev, p); ok {
			return ms
		}
	}
	return nil
}

// intValue is v, of size bytes, as an int64 (signed), bool or uint64.
func intValue(v uint64, kind debuginfo.TypeKind, size int64) any {
	shift := 64 - 8*uint(size)
	switch kind {
	case debuginfo.KindSigned:
		return int64(v<<shift) >> shift
	case debuginfo.KindBool:
		return v<<shift != 0
	}
	return v << shift >> shift
}
