package unwind

import (
	"encoding/binary"
	"fmt"
)

// reader decodes one CFI section's fields; every read is bounds
// checked and fails with a FormatError located in the section.
type reader struct {
	b       []byte
	off     uint64
	order   binary.ByteOrder
	section string
	// base is the section's link-time address, for pc-relative pointers.
	base uint64
}

func (r *reader) errorf(off uint64, format string, args ...any) error {
	return &FormatError{Section: r.section, Off: off, Msg: fmt.Sprintf(format, args...)}
}

func (r *reader) need(n uint64) error {
	if n > uint64(len(r.b)) || r.off > uint64(len(r.b))-n {
		return r.errorf(r.off, "%d bytes needed, the entry ends at %#x", n, len(r.b))
	}
	return nil
}

// fixed returns the next n bytes.
func (r *reader) fixed(n uint64) ([]byte, error) {
	if err := r.need(n); err != nil {
		return nil, err
	}
	b := r.b[r.off : r.off+n]
	r.off += n
	return b, nil
}

func (r *reader) u8() (uint8, error) {
	b, err := r.fixed(1)
	if err != nil {
		return 0, err
	}
	return b[0], nil
}

func (r *reader) u16() (uint16, error) {
	b, err := r.fixed(2)
	if err != nil {
		return 0, err
	}
	return r.order.Uint16(b), nil
}

func (r *reader) u32() (uint32, error) {
	b, err := r.fixed(4)
	if err != nil {
		return 0, err
	}
	return r.order.Uint32(b), nil
}

func (r *reader) u64() (uint64, error) {
	b, err := r.fixed(8)
	if err != nil {
		return 0, err
	}
	return r.order.Uint64(b), nil
}

// uleb reads an unsigned LEB128 (DWARF5 §7.6) of at most 10 bytes.
func (r *reader) uleb() (uint64, error) {
	var v uint64
	start := r.off
	for shift := uint(0); ; shift += 7 {
		if shift >= 70 {
			return 0, r.errorf(start, "LEB128 longer than 10 bytes")
		}
		b, err := r.u8()
		if err != nil {
			return 0, err
		}
		if shift < 64 {
			v |= uint64(b&0x7f) << shift
		}
		if b&0x80 == 0 {
			return v, nil
		}
	}
}

func (r *reader) sleb() (int64, error) {
	var v int64
	start := r.off
	for shift := uint(0); ; shift += 7 {
		if shift >= 70 {
			return 0, r.errorf(start, "LEB128 longer than 10 bytes")
		}
		b, err := r.u8()
		if err != nil {
			return 0, err
		}
		if shift < 64 {
			v |= int64(b&0x7f) << shift
		}
		if b&0x80 == 0 {
			if shift+7 < 64 && b&0x40 != 0 {
				v |= -1 << (shift + 7)
			}
			return v, nil
		}
	}
}

func (r *reader) cstring() (string, error) {
	for i := r.off; i < uint64(len(r.b)); i++ {
		if r.b[i] == 0 {
			s := string(r.b[r.off:i])
			r.off = i + 1
			return s, nil
		}
	}
	return "", r.errorf(r.off, "string without its NUL")
}

// DW_EH_PE_* (LSB 5.0 "DWARF Exception Header Encoding").
const (
	peAbsptr  = 0x00
	peULEB    = 0x01
	peUdata2  = 0x02
	peUdata4  = 0x03
	peUdata8  = 0x04
	peSigned  = 0x08
	peSLEB    = 0x09
	peSdata2  = 0x0a
	peSdata4  = 0x0b
	peSdata8  = 0x0c
	pePCRel   = 0x10
	peDataRel = 0x30
	peOmit    = 0xff
)

// pointer reads a pointer of encoding enc. pc-relative is relative to
// the field's own address (base + offset); data-relative, which only
// .eh_frame_hdr uses, to the start of the section being read. Text-,
// function-relative, aligned and indirect pointers are not computed.
func (r *reader) pointer(enc byte) (uint64, error) {
	if enc == peOmit {
		return 0, nil
	}
	at := r.off
	var v uint64
	var err error
	switch enc & 0x0f {
	case peAbsptr, peUdata8, peSdata8:
		v, err = r.u64()
	case peULEB:
		v, err = r.uleb()
	case peSLEB:
		var s int64
		s, err = r.sleb()
		v = uint64(s)
	case peUdata2:
		var u uint16
		u, err = r.u16()
		v = uint64(u)
	case peSdata2:
		var u uint16
		u, err = r.u16()
		v = uint64(int64(int16(u)))
	case peUdata4:
		var u uint32
		u, err = r.u32()
		v = uint64(u)
	case peSdata4:
		var u uint32
		u, err = r.u32()
		v = uint64(int64(int32(u)))
	default:
		return 0, r.errorf(at, "pointer encoding %#x", enc)
	}
	if err != nil {
		return 0, err
	}
	switch enc & 0x70 {
	case 0:
	case pePCRel:
		v += r.base + at
	case peDataRel:
		v += r.base
	default:
		return 0, fmt.Errorf("%w: pointer encoding %#x at %s offset %#x", ErrUnsupported, enc, r.section, at)
	}
	if enc&0x80 != 0 {
		return 0, fmt.Errorf("%w: indirect pointer at %s offset %#x", ErrUnsupported, r.section, at)
	}
	return v, nil
}
