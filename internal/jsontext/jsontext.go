// Package jsontext appends JSON strings without allocating.
package jsontext

import (
	"strconv"
	"unicode/utf8"
)

// Append appends s as a JSON string. Bytes that are not valid UTF-8
// (a hostile note's provider, a string argument cut in the middle of a
// character) become U+FFFD; control characters, U+2028 and U+2029 are
// escaped, all as encoding/json does. With escapeHTML, <, > and & are escaped as encoding/json does
// by default; without, they stay readable ("<string>", Python's name for
// code given with -c). It does not allocate beyond growing buf.
func Append[S ~string | ~[]byte](buf []byte, s S, escapeHTML bool) []byte {
	const hex = "0123456789abcdef"
	buf = append(buf, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				buf = append(buf, '\\', c)
			case c < 0x20 && shortEscape[c] != 0:
				buf = append(buf, '\\', shortEscape[c])
			case c < 0x20 || escapeHTML && (c == '<' || c == '>' || c == '&'):
				buf = append(buf, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				buf = append(buf, c)
			}
			i++
			continue
		}
		// At most 4 bytes: the conversion stays on the stack.
		r, size := utf8.DecodeRuneInString(string(s[i:min(i+utf8.UTFMax, len(s))]))
		if r == utf8.RuneError && size == 1 {
			buf = append(buf, `\ufffd`...)
		} else if r == '\u2028' || r == '\u2029' {
			buf = append(buf, `\u202`...)
			buf = append(buf, hex[r&0xf])
		} else {
			buf = append(buf, s[i:i+size]...)
		}
		i += size
	}
	return append(buf, '"')
}

// shortEscape holds the control characters JSON escapes by a letter, as
// encoding/json writes them.
var shortEscape = [0x20]byte{'\b': 'b', '\f': 'f', '\n': 'n', '\r': 'r', '\t': 't'}

// AppendSource appends a frame's ,"file":FILE,"line":LINE when line is
// known (above 0), and ,"inlined":true for an inlined frame.
func AppendSource(b []byte, file string, line int, inlined bool) []byte {
	if line > 0 {
		b = append(b, `,"file":`...)
		b = Append(b, file, false)
		b = append(b, `,"line":`...)
		b = strconv.AppendInt(b, int64(line), 10)
	}
	if inlined {
		b = append(b, `,"inlined":true`...)
	}
	return b
}
