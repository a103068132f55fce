package tracer

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/probekit/probekit/record"
)

// filterError is a bad --filter expression: what is wrong, at which
// column (from 1).
type filterError struct {
	col int
	msg string
}

func (e *filterError) Error() string { return fmt.Sprintf("column %d: %s", e.col, e.msg) }

// filterToken is a word of a filter expression: an identifier, a number,
// a quoted string (str set), an operator, && or ||.
type filterToken struct {
	text string
	str  bool
	col  int
}

// lexFilter splits s into tokens.
func lexFilter(s string) ([]filterToken, error) {
	var toks []filterToken
	i := 0
	for i < len(s) {
		c := s[i]
		col := i + 1
		switch {
		case c == ' ' || c == '\t':
			i++
		case c == '"':
			var b strings.Builder
			j := i + 1
			for ; j < len(s) && s[j] != '"'; j++ {
				if s[j] == '\\' && j+1 < len(s) {
					j++
				}
				b.WriteByte(s[j])
			}
			if j >= len(s) {
				return nil, &filterError{col, "unterminated string"}
			}
			toks = append(toks, filterToken{text: b.String(), str: true, col: col})
			i = j + 1
		case strings.ContainsRune("=!<>&|", rune(c)):
			j := i + 1
			for j < len(s) && j < i+2 && strings.ContainsRune("=&|", rune(s[j])) {
				j++
			}
			toks = append(toks, filterToken{text: s[i:j], col: col})
			i = j
		case c == '-' || c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			j := i + 1
			for j < len(s) && (s[j] == '_' || s[j] >= '0' && s[j] <= '9' || s[j] >= 'a' && s[j] <= 'z' || s[j] >= 'A' && s[j] <= 'Z') {
				j++
			}
			toks = append(toks, filterToken{text: s[i:j], col: col})
			i = j
		default:
			return nil, &filterError{col, fmt.Sprintf("unexpected %q (parentheses and other operators are not supported)", c)}
		}
	}
	return toks, nil
}

var filterOps = map[string]record.FilterOp{
	"==": record.FilterEQ, "!=": record.FilterNE, "<": record.FilterLT, "<=": record.FilterLE,
	">": record.FilterGT, ">=": record.FilterGE,
}

// ParseFilter compiles EXPR (probekit trace's --filter) for
// Config.Filter: terms FIELD OP CONSTANT joined by && and || (&& first).
// FIELD is argN or strN (N from 1), ret, pid, tid or comm;
// a number compares with == != < <= > >=, a string ("...") with == and
// !=, and a string ending in * with == and != matches a prefix. ret
// (a return value) is value 0.
//
// usesRet and usesArgs say whether a term compares ret, or an argN or
// strN.
func ParseFilter(s string) (terms []record.FilterTerm, usesRet, usesArgs bool, err error) {
	toks, err := lexFilter(s)
	if err != nil {
		return nil, false, false, err
	}
	end := len(s) + 1
	at := func(i int) (filterToken, bool) {
		if i < len(toks) {
			return toks[i], true
		}
		return filterToken{col: end}, false
	}
	for i := 0; ; {
		field, ok := at(i)
		if !ok {
			return nil, false, false, &filterError{field.col, "want a field: argN, strN, ret, pid, tid or comm"}
		}
		var t record.FilterTerm
		isStr := false
		switch name := field.text; {
		case field.str:
			return nil, false, false, &filterError{field.col, "want a field before a string"}
		case name == "pid":
			t.Field = record.FilterPID
		case name == "tid":
			t.Field = record.FilterTID
		case name == "ret":
			t.Field, usesRet = record.FilterArg, true
		case name == "comm":
			t.Field, isStr = record.FilterComm, true
		case strings.HasPrefix(name, "arg") || strings.HasPrefix(name, "str"):
			n, err := strconv.Atoi(name[3:])
			if err != nil || n < 1 || n > record.MaxArgs {
				return nil, false, false, &filterError{field.col, fmt.Sprintf("%s: want %sN, N from 1 to %d", name, name[:3], record.MaxArgs)}
			}
			t.Val, usesArgs = n-1, true
			if name[:3] == "str" {
				t.Field, isStr = record.FilterStr, true
			}
		default:
			return nil, false, false, &filterError{field.col, fmt.Sprintf("unknown field %q: want argN, strN, ret, pid, tid or comm", name)}
		}
		opTok, _ := at(i + 1)
		op, ok := filterOps[opTok.text]
		if !ok || opTok.str {
			return nil, false, false, &filterError{opTok.col, "want a comparison: == != < <= > >="}
		}
		val, ok := at(i + 2)
		if !ok {
			return nil, false, false, &filterError{val.col, "want a constant"}
		}
		if isStr {
			if !val.str {
				return nil, false, false, &filterError{val.col, field.text + " compares with a string (\"...\")"}
			}
			if op != record.FilterEQ && op != record.FilterNE {
				return nil, false, false, &filterError{opTok.col, "strings compare with == and != only"}
			}
			t.Op, t.Str = op, val.text
			if p, ok := strings.CutSuffix(val.text, "*"); ok {
				t.Str, t.Op = p, record.FilterPrefix
				if op == record.FilterNE {
					t.Op = record.FilterNotPrefix
				}
			}
			if max := record.KeyStrLen - 1; len(t.Str) > max || t.Field == record.FilterComm && len(t.Str) > 15 {
				return nil, false, false, &filterError{val.col, "string too long (strN: at most 63 bytes, comm: 15)"}
			}
		} else {
			if val.str {
				return nil, false, false, &filterError{val.col, field.text + " compares with a number"}
			}
			n, err := strconv.ParseInt(val.text, 0, 64)
			if err != nil {
				return nil, false, false, &filterError{val.col, fmt.Sprintf("%q: want an integer", val.text)}
			}
			t.Op, t.Num = op, n
		}
		i += 3
		join, ok := at(i)
		if !ok {
			terms = append(terms, t)
			break
		}
		switch join.text {
		case "||":
			t.OrAfter = true
		case "&&":
		default:
			return nil, false, false, &filterError{join.col, "want && or ||"}
		}
		terms = append(terms, t)
		if len(terms) == record.MaxFilterTerms {
			return nil, false, false, &filterError{join.col, fmt.Sprintf("at most %d comparisons", record.MaxFilterTerms)}
		}
		i++
	}
	return terms, usesRet, usesArgs, nil
}
