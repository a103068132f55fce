package tracer

import (
	"strings"
	"testing"

	"github.com/probekit/probekit/record"
)

// Bad expressions: one line, with the column.
func TestParseFilter(t *testing.T) {
	for _, c := range []struct{ expr, want string }{
		{"arg1 >", "column 7: want a constant"},
		{"arg1 > 4096 & pid == 1", "column 13: want && or ||"},
		{"(pid == 1)", "column 1: unexpected '('"},
		{"arg0 == 1", "column 1: arg0: want argN, N from 1"},
		{"foo == 1", `column 1: unknown field "foo"`},
		{"comm == 3", "column 9: comm compares with a string"},
		{`pid == "x"`, "column 8: pid compares with a number"},
		{`comm < "x"`, "column 6: strings compare with == and != only"},
		{`str1 == "abc`, "column 9: unterminated string"},
		{"pid = 3", "column 5: want a comparison"},
		{"pid == 0x1g", `column 8: "0x1g": want an integer`},
		{"pid == 1 ||", "column 12: want a field"},
		{strings.Repeat("pid == 1 || ", 8) + "pid == 2", "at most 8 comparisons"},
	} {
		_, _, _, err := ParseFilter(c.expr)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: %v, want %q", c.expr, err, c.want)
		}
	}
	terms, _, _, err := ParseFilter(`comm == "post*" || arg2 >= -0x10 && str1 != "a\"b"`)
	if err != nil || len(terms) != 3 || terms[0].Str != "post" || !terms[0].OrAfter || terms[1].Num != -16 || terms[2].Str != `a"b` {
		t.Errorf("terms %+v, %v", terms, err)
	}
}

// FuzzParseFilter: any expression parses or is refused with a located
// one-line error; a parsed one has at most 8 terms.
func FuzzParseFilter(f *testing.F) {
	for _, s := range []string{`arg1 > 4096`, `comm == "post*" || arg2 >= -0x10 && str1 != "a\"b"`, `pid == 1 || tid != 2`, `ret < 0`, `str2 == "`, `arg9 == 1`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		terms, _, _, err := ParseFilter(s)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("%q: error on two lines: %v", s, err)
			}
			return
		}
		if len(terms) == 0 || len(terms) > 8 {
			t.Errorf("%q: %d terms", s, len(terms))
		}
	})
}

// FuzzParseKeys: any key list parses within the limits or is refused.
func FuzzParseKeys(f *testing.F) {
	for _, s := range []string{"arg 1", "str 2,comm", "pid,tid,probe,func", "stack", "ret", "arg9", "str1,str2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		keys, err := ParseKeys(s)
		if err != nil {
			return
		}
		if len(keys) == 0 || len(keys) > record.MaxKeys {
			t.Errorf("%q: %d keys", s, len(keys))
		}
		for _, k := range keys {
			if k.Name == "" {
				t.Errorf("%q: a key without a name: %+v", s, k)
			}
		}
	})
}
