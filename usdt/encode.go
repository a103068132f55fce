package usdt

// The encoding of a spec: struct __bpf_usdt_spec in the byte layout of the
// object being attached (libbpf 1.7's 304-byte spec, with base+index
// operands, or the 208-byte one of libbpf 0.8 to 1.6), read from the BTF
// of its __bpf_usdt_specs map value rather than assumed.

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cilium/ebpf/btf"
)

// A field of the spec value: its bit offset from the start of the struct
// holding it and its width in bits, as BTF records them.
type specField struct {
	bitOff uint32
	bits   uint32
}

// specLayout is where the fields of struct __bpf_usdt_spec lie in one BPF
// object, taken from the BTF of its __bpf_usdt_specs value.
type specLayout struct {
	valueSize int
	argsOff   uint32 // byte offset of args[0]
	argStride uint32 // size of one arg record
	argCap    int    // number of arg records
	cookie    specField
	argCnt    specField
	valOff    specField
	argType   specField
	regOff    specField
	signed    specField
	bitShift  specField
	// Only in the libbpf 1.7 layout; bits == 0 when absent.
	idxRegOff  specField
	scaleShift specField
}

// errSpecLayout marks a __bpf_usdt_specs value type that is not a USDT
// spec probekit can fill.
var errSpecLayout = errors.New("unexpected USDT spec layout (build the BPF program with probekit's usdt.bpf.h or libbpf's)")

// newSpecLayout reads the layout of struct __bpf_usdt_spec from value, the
// BTF type of the __bpf_usdt_specs map value. Both libbpf layouts are
// accepted; anything missing a field the BPF side needs is refused.
func newSpecLayout(value btf.Type) (*specLayout, error) {
	st, ok := btf.UnderlyingType(value).(*btf.Struct)
	if !ok {
		return nil, fmt.Errorf("%w: value is %v, not a struct", errSpecLayout, value)
	}
	l := &specLayout{valueSize: int(st.Size)}
	var args *btf.Member
	for i := range st.Members {
		m := &st.Members[i]
		var err error
		switch m.Name {
		case "args":
			args = m
		case "usdt_cookie":
			l.cookie, err = intField(m, st.Size)
		case "arg_cnt":
			l.argCnt, err = intField(m, st.Size)
		}
		if err != nil {
			return nil, err
		}
	}
	if args == nil {
		return nil, fmt.Errorf("%w: no member args", errSpecLayout)
	}
	arr, ok := btf.UnderlyingType(args.Type).(*btf.Array)
	if !ok || args.BitfieldSize != 0 || args.Offset%8 != 0 {
		return nil, fmt.Errorf("%w: args is not an array", errSpecLayout)
	}
	elem, ok := btf.UnderlyingType(arr.Type).(*btf.Struct)
	if !ok {
		return nil, fmt.Errorf("%w: args is not an array of structs", errSpecLayout)
	}
	l.argsOff = args.Offset.Bytes()
	l.argStride = elem.Size
	l.argCap = int(arr.Nelems)
	if l.argCap < 1 || l.argCap > maxSpecArgs || elem.Size == 0 ||
		uint64(l.argsOff)+uint64(l.argStride)*uint64(l.argCap) > uint64(st.Size) {
		return nil, fmt.Errorf("%w: args[%d] of %d bytes does not fit a %d-byte spec", errSpecLayout, arr.Nelems, elem.Size, st.Size)
	}
	for i := range elem.Members {
		m := &elem.Members[i]
		f := map[string]*specField{
			"val_off":        &l.valOff,
			"arg_type":       &l.argType,
			"reg_off":        &l.regOff,
			"arg_signed":     &l.signed,
			"arg_bitshift":   &l.bitShift,
			"idx_reg_off":    &l.idxRegOff,
			"scale_bitshift": &l.scaleShift,
		}[m.Name]
		if f == nil {
			continue
		}
		var err error
		if *f, err = intField(m, elem.Size); err != nil {
			return nil, err
		}
	}
	// The narrowest width each field can have and still hold what the
	// BPF side expects: val_off and the cookie are 64-bit values, arg_type
	// holds 0..4, reg_off a pt_regs offset, arg_bitshift up to 56,
	// arg_cnt up to 12.
	need := []struct {
		name string
		f    specField
		min  uint32
	}{
		{"usdt_cookie", l.cookie, 64},
		{"arg_cnt", l.argCnt, 4},
		{"val_off", l.valOff, 64},
		{"arg_type", l.argType, 3},
		{"reg_off", l.regOff, 9},
		{"arg_signed", l.signed, 1},
		{"arg_bitshift", l.bitShift, 6},
	}
	for _, n := range need {
		if n.f.bits < n.min {
			if n.f.bits == 0 {
				return nil, fmt.Errorf("%w: no member %s", errSpecLayout, n.name)
			}
			return nil, fmt.Errorf("%w: %s has %d bits, needs %d", errSpecLayout, n.name, n.f.bits, n.min)
		}
	}
	if (l.idxRegOff.bits == 0) != (l.scaleShift.bits == 0) {
		return nil, fmt.Errorf("%w: idx_reg_off and scale_bitshift must come together", errSpecLayout)
	}
	if l.idxRegOff.bits != 0 && l.scaleShift.bits < 2 {
		return nil, fmt.Errorf("%w: scale_bitshift has %d bits, needs 2", errSpecLayout, l.scaleShift.bits)
	}
	return l, nil
}

// intField is where an integer, enum or bool member lies, checked to lie
// within a struct of size bytes.
func intField(m *btf.Member, size uint32) (specField, error) {
	t := btf.UnderlyingType(m.Type)
	switch t.(type) {
	case *btf.Int, *btf.Enum:
	default:
		return specField{}, fmt.Errorf("%w: member %s is %v, not an integer", errSpecLayout, m.Name, t)
	}
	f := specField{bitOff: uint32(m.Offset), bits: uint32(m.BitfieldSize)}
	if f.bits == 0 {
		n, err := btf.Sizeof(t)
		if err != nil {
			return specField{}, fmt.Errorf("%w: member %s: %w", errSpecLayout, m.Name, err)
		}
		if m.Offset%8 != 0 {
			return specField{}, fmt.Errorf("%w: member %s is not byte-aligned", errSpecLayout, m.Name)
		}
		f.bits = uint32(n) * 8
	}
	if f.bits > 64 || uint64(f.bitOff)+uint64(f.bits) > uint64(size)*8 {
		return specField{}, fmt.Errorf("%w: member %s (bits %d+%d) outside its %d-byte struct", errSpecLayout, m.Name, f.bitOff, f.bits, size)
	}
	return f, nil
}

// size is the byte size of one spec (the map's value size).
func (l *specLayout) size() int { return l.valueSize }

// hasSIB reports whether the layout has an index register (libbpf 1.7+).
func (l *specLayout) hasSIB() bool { return l.idxRegOff.bits != 0 }

// fit marks unavailable, in place, the arguments of s the layout cannot
// express (SIB in the pre-1.7 layout, an index register offset or scale
// wider than its bitfield, more arguments than records) and returns why,
// one error per argument, for the caller's warnings. encode calls it too.
func (l *specLayout) fit(s *bpfSpec) []error {
	var errs []error
	if len(s.Args) > l.argCap {
		for i := l.argCap; i < len(s.Args); i++ {
			errs = append(errs, &argUnavailableError{Index: i,
				Reason: fmt.Sprintf("the BPF object's spec holds %d arguments; dropped", l.argCap)})
		}
		s.Args = s.Args[:l.argCap]
	}
	for i := range s.Args {
		a := &s.Args[i]
		reason := ""
		switch {
		case a.Type == argSIB && !l.hasSIB():
			reason = "base+index*scale operand needs the libbpf 1.7 spec layout; the BPF object was built with an older usdt.bpf.h (rebuild it with probekit's)"
		case a.Type == argSIB && (!fits(uint64(a.IdxRegOff), l.idxRegOff.bits) || !fits(uint64(a.ScaleShift), l.scaleShift.bits)):
			reason = fmt.Sprintf("index register offset %d or scale shift %d does not fit the spec's bitfields", a.IdxRegOff, a.ScaleShift)
		case !fitsSigned(int64(a.RegOff), l.regOff.bits):
			reason = fmt.Sprintf("register offset %d does not fit the spec's %d-bit reg_off", a.RegOff, l.regOff.bits)
		case !fits(uint64(a.Type), l.argType.bits):
			reason = fmt.Sprintf("argument type %d does not fit the spec's %d-bit arg_type", a.Type, l.argType.bits)
		}
		if reason != "" {
			*a = bpfArg{Type: argUnavailable, BitShift: a.BitShift}
			errs = append(errs, &argUnavailableError{Index: i, Reason: reason})
		}
	}
	return errs
}

func fits(v uint64, bits uint32) bool { return bits >= 64 || v < 1<<bits }

func fitsSigned(v int64, bits uint32) bool {
	if bits >= 64 {
		return true
	}
	lim := int64(1) << (bits - 1)
	return v >= -lim && v < lim
}

// hostBigEndian is the byte order of the kernel that reads the specs.
var hostBigEndian = binary.NativeEndian.Uint16([]byte{0, 1}) == 1

// encode marshals s in the layout, in the host's byte order (the BPF
// program runs on the host). Arguments the layout cannot express are first
// made unavailable, as fit does (call fit beforehand to collect the
// reasons).
func (l *specLayout) encode(s *bpfSpec) ([]byte, error) {
	return l.encodeOrder(s, hostBigEndian)
}

func (l *specLayout) encodeOrder(s *bpfSpec, bigEndian bool) ([]byte, error) {
	l.fit(s)
	buf := make([]byte, l.valueSize)
	w := bitWriter{buf: buf, bigEndian: bigEndian}
	w.put(0, l.cookie, s.Cookie)
	w.put(0, l.argCnt, uint64(len(s.Args)))
	for i, a := range s.Args {
		base := uint64(l.argsOff) + uint64(i)*uint64(l.argStride)
		w.put(base, l.valOff, a.ValOff)
		w.put(base, l.argType, uint64(a.Type))
		w.put(base, l.regOff, uint64(int64(a.RegOff)))
		if l.hasSIB() {
			w.put(base, l.idxRegOff, uint64(a.IdxRegOff))
			w.put(base, l.scaleShift, uint64(a.ScaleShift))
		}
		var signed uint64
		if a.Signed {
			signed = 1
		}
		w.put(base, l.signed, signed)
		w.put(base, l.bitShift, uint64(a.BitShift))
	}
	return buf, nil
}

// bitWriter stores values into fields placed by BTF bit offsets. Bit
// offsets count from the least significant bit of the first byte on a
// little-endian target and from the most significant bit on a big-endian
// one (as clang's BTF and libbpf's CO-RE bitfield relocations interpret
// them), which makes a whole-byte field an ordinary integer in that byte
// order.
type bitWriter struct {
	buf       []byte
	bigEndian bool
}

// put stores the low f.bits bits of v into the field f of the struct
// starting at byte base. Bits of v above the field's width are dropped
// (fit has checked the values that could have any).
func (w bitWriter) put(base uint64, f specField, v uint64) {
	for i := range uint64(f.bits) {
		p, mask := w.bit(base, f, i)
		if v>>i&1 != 0 {
			w.buf[p] |= mask
		} else {
			w.buf[p] &^= mask
		}
	}
}

// bit is the byte and the mask of bit i (from the least significant) of
// the field f of the struct starting at byte base.
func (w bitWriter) bit(base uint64, f specField, i uint64) (uint64, byte) {
	start := base*8 + uint64(f.bitOff)
	if w.bigEndian {
		p := start + uint64(f.bits) - 1 - i
		return p / 8, 0x80 >> (p % 8)
	}
	p := start + i
	return p / 8, 1 << (p % 8)
}

// get reads the field f of the struct starting at byte base, as put
// stored it.
func (w bitWriter) get(base uint64, f specField) uint64 {
	var v uint64
	for i := range uint64(f.bits) {
		if p, mask := w.bit(base, f, i); w.buf[p]&mask != 0 {
			v |= 1 << i
		}
	}
	return v
}

// decodeArg reads argument i of the encoded spec b, which is
// l.valueSize bytes.
func (l *specLayout) decodeArg(b []byte, i int) bpfArg {
	r := bitWriter{buf: b, bigEndian: hostBigEndian}
	base := uint64(l.argsOff) + uint64(i)*uint64(l.argStride)
	a := bpfArg{
		Type:     uint8(r.get(base, l.argType)),
		ValOff:   r.get(base, l.valOff),
		RegOff:   int16(signExtend(r.get(base, l.regOff), l.regOff.bits)),
		Signed:   r.get(base, l.signed) != 0,
		BitShift: uint8(r.get(base, l.bitShift)),
	}
	if l.hasSIB() {
		a.IdxRegOff = uint16(r.get(base, l.idxRegOff))
		a.ScaleShift = uint8(r.get(base, l.scaleShift))
	}
	return a
}

// signExtend extends the low bits of v as a signed number.
func signExtend(v uint64, bits uint32) int64 {
	if bits == 0 || bits >= 64 {
		return int64(v)
	}
	shift := 64 - bits
	return int64(v<<shift) >> shift
}
