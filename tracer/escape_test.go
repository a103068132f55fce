package tracer

import (
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestEscape(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"python3.11", "python3.11"},
		{"x\x1b[2Jy\nz", `x\x1b[2Jy\nz`},
		{"tab\there", `tab\there`},
		{`a\b`, `a\\b`},
		{"caf\u00e9 \u4e16", "caf\u00e9 \u4e16"},
		{"bad\xffutf8\xc3", `bad\xffutf8\xc3`},
		{"del\x7f nul\x00", `del\x7f nul\x00`},
		{"zw\u200bsp", `zw\u200bsp`},
		{"", ""},
	} {
		if got := Escape(c.in); got != c.want {
			t.Errorf("Escape(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// FuzzEscape: the escaped text is printable valid UTF-8 on one line, and
// reads back (as a Go string literal's body, quotes escaped) to the bytes
// it came from.
func FuzzEscape(f *testing.F) {
	for _, s := range []string{"comm", "x\x1b[2Jy\nz", "\xff\xfe", `\"`, "\u2028"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		e := Escape(s)
		if !utf8.ValidString(e) || strings.ContainsAny(e, "\n\r\x1b") {
			t.Fatalf("Escape(%q) = %q", s, e)
		}
		for _, r := range e {
			if !strconv.IsPrint(r) {
				t.Fatalf("Escape(%q) = %q: unprintable %U", s, e, r)
			}
		}
		back, err := strconv.Unquote(`"` + strings.ReplaceAll(e, `"`, `\"`) + `"`)
		if err != nil || back != s {
			t.Fatalf("Escape(%q) = %q reads back as %q, %v", s, e, back, err)
		}
	})
}
