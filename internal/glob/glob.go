// Package glob matches names against the shell-style patterns probekit's
// users type for probes and functions ("python:function__*", "uv_fs_*",
// "malloc@@GLIBC_2.?"). It is not API.
//
// '*' matches any run of bytes, '/' and '.' included (Go and C++ names
// contain them); '?' matches one byte; '\' makes the next byte literal.
// '[' is an ordinary byte: C++ ABI tags ("[abi:cxx11]") contain it.
package glob

import "strings"

// Match reports whether name matches pattern. It is iterative with one
// backtrack point (the last '*'), so any pattern costs at most
// O(len(pattern)*len(name)): a hostile "*a*a*a...b" cannot make it
// exponential.
func Match(pattern, name string) bool {
	p, n := 0, 0
	star, mark := -1, 0 // pattern index after the last '*', name index it resumes at
	for n < len(name) {
		if p < len(pattern) {
			c := pattern[p]
			switch {
			case c == '*':
				p++
				star, mark = p, n
				continue
			case c == '?':
				p++
				n++
				continue
			case c == '\\' && p+1 < len(pattern):
				if pattern[p+1] == name[n] {
					p += 2
					n++
					continue
				}
			case c == name[n]: // a trailing '\' is literal
				p++
				n++
				continue
			}
		}
		if star < 0 {
			return false
		}
		// Let the last '*' swallow one more byte and retry from there.
		mark++
		p, n = star, mark
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// Prefix returns the literal head of pattern: the bytes before its first
// '*', '?' or '\'. Every name pattern matches starts with it, so a caller
// scanning many names rejects most of them with a prefix compare.
func Prefix(pattern string) string {
	if i := strings.IndexAny(pattern, `*?\`); i >= 0 {
		return pattern[:i]
	}
	return pattern
}

// Literal reports whether pattern has no '*', '?' or '\': it then
// matches exactly one name, itself.
func Literal(pattern string) bool { return !strings.ContainsAny(pattern, `*?\`) }
