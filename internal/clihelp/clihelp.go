// Package clihelp prints the flags of probekit's commands for --help.
package clihelp

import (
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
)

// WriteFlags lists fs's flags, one a line: a one-letter flag as -x, a
// longer one as --name, then its value's name, its meaning and its
// default when that is not the zero value.
func WriteFlags(w io.Writer, fs *flag.FlagSet) {
	type line struct{ left, right string }
	var lines []line
	width := 0
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		left := "-" + f.Name
		if len(f.Name) > 1 {
			left = "--" + f.Name
		}
		if name != "" {
			left += " " + valueName(name, usage)
		}
		if d := f.DefValue; d != "" && d != "0" && d != "false" {
			usage += " (default " + d + ")"
		}
		lines = append(lines, line{left, usage})
		width = max(width, len(left))
	})
	sort.Slice(lines, func(i, j int) bool {
		return strings.TrimLeft(lines[i].left, "-") < strings.TrimLeft(lines[j].left, "-")
	})
	for _, l := range lines {
		fmt.Fprintf(w, "  %-*s  %s\n", width, l.left, l.right)
	}
}

// valueName is a flag's value as its meaning names it: the first word in
// capitals of usage (COUNT in "exit after COUNT hits", N), else the
// type's name that flag.UnquoteUsage gave.
func valueName(typeName, usage string) string {
	if typeName != "string" && typeName != "int" && typeName != "value" && typeName != "uint" {
		return typeName // named in backquotes
	}
	for _, w := range strings.FieldsFunc(usage, func(r rune) bool {
		return !(r >= 'A' && r <= 'Z' || r == '_')
	}) {
		if len(w) >= 2 || w == "N" {
			return w
		}
	}
	return typeName
}
