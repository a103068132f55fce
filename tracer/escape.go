package tracer

import (
	"strconv"
	"unicode/utf8"
)

// Escape makes text that a traced program controls (its comm, string
// arguments, names from its symbol tables and perf maps, its file paths)
// safe to print on a terminal and in line-based output: printable text is
// kept as it is; a backslash becomes \\, the control bytes that Go's
// strconv quoting names become \a \b \f \n \r \t \v, other bytes below
// 0x20, DEL and each byte of invalid UTF-8 become \xNN, and other
// unprintable runes \uNNNN or \UNNNNNNNN (strconv.IsPrint). So a comm of
// "x\x1b[2Jy\nz" prints as x\x1b[2Jy\nz: no terminal escape reaches the
// reader, and one key stays on one line. JSON output is escaped by its own
// rules (internal/jsontext), not by Escape.
func Escape(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '\\' || c >= 0x7f {
			return string(AppendEscaped(make([]byte, 0, len(s)+8), s))
		}
	}
	return s
}

// AppendEscaped appends s to b, escaped as by Escape. It allocates
// nothing beyond growing b.
func AppendEscaped[S ~string | ~[]byte](b []byte, s S) []byte {
	const hex = "0123456789abcdef"
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c < 0x7f {
			if c == '\\' {
				b = append(b, '\\')
			}
			b = append(b, c)
			i++
			continue
		}
		// At most 4 bytes: the conversion stays on the stack.
		r, n := utf8.DecodeRuneInString(string(s[i:min(i+utf8.UTFMax, len(s))]))
		switch {
		case r == utf8.RuneError && n == 1:
			b = append(b, '\\', 'x', hex[c>>4], hex[c&0xf])
		case r < utf8.RuneSelf:
			switch c {
			case '\a':
				b = append(b, `\a`...)
			case '\b':
				b = append(b, `\b`...)
			case '\f':
				b = append(b, `\f`...)
			case '\n':
				b = append(b, `\n`...)
			case '\r':
				b = append(b, `\r`...)
			case '\t':
				b = append(b, `\t`...)
			case '\v':
				b = append(b, `\v`...)
			default:
				b = append(b, '\\', 'x', hex[c>>4], hex[c&0xf])
			}
		case strconv.IsPrint(r):
			b = append(b, s[i:i+n]...)
		case r < 0x10000:
			b = append(b, `\u`...)
			for sh := 12; sh >= 0; sh -= 4 {
				b = append(b, hex[r>>sh&0xf])
			}
		default:
			b = append(b, `\U`...)
			for sh := 28; sh >= 0; sh -= 4 {
				b = append(b, hex[r>>sh&0xf])
			}
		}
		i += n
	}
	return b
}
