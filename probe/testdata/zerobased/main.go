// Package main holds the 0-based habits that must not compile: each line
// marked "want" is an error TestZeroBasedDoesNotCompile expects from the
// compiler.
package main

import (
	"github.com/probekit/probekit/exporter"
	"github.com/probekit/probekit/probe"
	"github.com/probekit/probekit/tracer"
)

func main() {
	_ = exporter.Label{Name: "line", Arg: 2}      // want "cannot use 2"
	_ = exporter.Metric{Name: "size", Value: 0}   // want "cannot use 0"
	_ = tracer.Config{HistValue: 0}               // want "cannot use 0"
	_ = tracer.Config{StrMask: 0b11}              // want "unknown field StrMask"
	_ = tracer.Config{Strs: []probe.ArgNum{0, 1}} // want "cannot use 0"
	_ = func(h *tracer.Hit) { h.Str(1) }          // want "cannot use 1"
	_ = exporter.NoValue                          // want "undefined: exporter.NoValue"
}
