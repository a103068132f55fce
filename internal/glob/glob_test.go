package glob

import (
	"strings"
	"testing"
	"time"
)

func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, name string
		want          bool
	}{
		{"", "", true},
		{"", "a", false},
		{"*", "", true},
		{"**", "abc", true},
		{"uv_fs_*", "uv_fs_open", true},
		{"uv_fs_*", "uv_fs_", true},
		{"uv_fs_*", "uv_f", false},
		{"main.*", "main.(*T).String", true},
		{"net/http.*", "net/http.(*conn).serve", true},
		{"a?c", "abc", true},
		{"a?c", "ac", false},
		{"a*b*c", "axxbyyc", true},
		{"a*b*c", "axxbyy", false},
		{"*a", "bbba", true},
		{"*a", "bbab", false},
		{"*x*y*", "axbyc", true},
		{"*x*y", "axbyc", false},
		{`a\*b`, "a*b", true},
		{`a\*b`, "axb", false},
		{`a\?`, "a?", true},
		{`a\?`, "ab", false},
		{`a\\`, `a\`, true},
		{`a\`, `a\`, true},
		{`*\*`, "xx*", true},
		{"_ZN[abi:cxx11]*", "_ZN[abi:cxx11]foo", true},
		{"[abc]", "a", false},
		{"malloc", "malloc", true},
		{"malloc", "malloc2", false},
		{"malloc@@GLIBC_2.2.?", "malloc@@GLIBC_2.2.5", true},
		{"python:function__*", "python:function__entry", true},
		{strings.Repeat("*a", 50) + "b", strings.Repeat("a", 200), false},
	} {
		if got := Match(tc.pattern, tc.name); got != tc.want {
			t.Errorf("Match(%q, %q) = %v, want %v", tc.pattern, tc.name, got, tc.want)
		}
	}
}

// TestMatchLinear: a pattern built to make a backtracking matcher
// exponential stays well under a second on a long name.
func TestMatchLinear(t *testing.T) {
	pattern := strings.Repeat("*a", 500) + "b"
	name := strings.Repeat("a", 20000)
	start := time.Now()
	if Match(pattern, name) {
		t.Fatal("matched")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v", d)
	}
}

func TestPrefix(t *testing.T) {
	for pattern, want := range map[string]string{
		"":          "",
		"uv_fs_*":   "uv_fs_",
		"a?c":       "a",
		`a\*b`:      "a",
		"malloc":    "malloc",
		"*":         "",
		"main.(*T)": "main.(",
	} {
		if got := Prefix(pattern); got != want {
			t.Errorf("Prefix(%q) = %q, want %q", pattern, got, want)
		}
		if Literal(pattern) != (want == pattern) {
			t.Errorf("Literal(%q) = %v", pattern, Literal(pattern))
		}
	}
}

// FuzzMatch: no panic, and every match starts with the pattern's prefix.
func FuzzMatch(f *testing.F) {
	f.Add("uv_fs_*", "uv_fs_open")
	f.Add(`a\*?b*`, "a*xbyy")
	f.Add("*a*a*b", "aaaaaaaa")
	f.Fuzz(func(t *testing.T, pattern, name string) {
		if Match(pattern, name) && !strings.HasPrefix(name, Prefix(pattern)) {
			t.Fatalf("%q matches %q without its prefix %q", pattern, name, Prefix(pattern))
		}
		if Literal(pattern) && Match(pattern, name) != (pattern == name) {
			t.Fatalf("literal %q vs %q", pattern, name)
		}
	})
}
