package python

import (
	"encoding/binary"
	"errors"
	"unicode/utf8"
)

// maxStringChars bounds a name or file name read from the process:
// PATH_MAX (4096) is the longest file name the kernel takes.
const maxStringChars = 4096

// String kinds and state bits of PyASCIIObject.state (3.8-3.14:
// interned in bits 0-1, kind in 2-4, compact 5, ascii 6).
const (
	stateKindShift = 2
	stateCompact   = 1 << 5
	stateASCII     = 1 << 6
)

var (
	errNotCompact = errors.New("string not compact")
	errStrKind    = errors.New("string of an unknown kind")
	errStrLong    = errors.New("string longer than the ceiling")
)

// strHeader decodes a str object's header (hdr holds at least
// CompactSize bytes from its start): where its characters are, how many
// and their width.
func strHeader(o *Offsets, hdr []byte) (dataOff int, n int, kind int, err error) {
	if len(hdr) < o.CompactSize || o.StrLength+8 > len(hdr) || o.StrState+4 > len(hdr) {
		return 0, 0, 0, errors.New("string header short")
	}
	length := int64(binary.LittleEndian.Uint64(hdr[o.StrLength:]))
	state := binary.LittleEndian.Uint32(hdr[o.StrState:])
	if length < 0 || length > maxStringChars {
		return 0, 0, 0, errStrLong
	}
	if state&stateCompact == 0 {
		return 0, 0, 0, errNotCompact
	}
	kind = int(state>>stateKindShift) & 7
	dataOff = o.CompactSize
	if state&stateASCII != 0 {
		kind, dataOff = 1, o.ASCIISize
	}
	if kind != 1 && kind != 2 && kind != 4 {
		return 0, 0, 0, errStrKind
	}
	return dataOff, int(length), kind, nil
}

// decodeChars makes a Go string of n characters of kind (1: latin-1 or
// ASCII, 2: UCS-2, 4: UCS-4) in b; an invalid code point becomes
// U+FFFD.
func decodeChars(b []byte, n, kind int) string {
	if n*kind > len(b) {
		n = len(b) / kind
	}
	out := make([]byte, 0, n)
	for i := 0; i < n; i++ {
		var r rune
		switch kind {
		case 1:
			r = rune(b[i])
		case 2:
			r = rune(binary.LittleEndian.Uint16(b[2*i:]))
		default:
			r = rune(binary.LittleEndian.Uint32(b[4*i:]))
		}
		if !utf8.ValidRune(r) {
			r = utf8.RuneError
		}
		out = utf8.AppendRune(out, r)
	}
	return string(out)
}
