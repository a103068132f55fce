package main

import (
	"github.com/probekit/probekit/internal/jsontext"
	"github.com/probekit/probekit/symbolize"
)

// appendJSON appends s as a JSON string (jsontext.Append).
func appendJSON[S ~string | ~[]byte](buf []byte, s S, escapeHTML bool) []byte {
	return jsontext.Append(buf, s, escapeHTML)
}

// appendSourceJSON appends f's file, line and inlined mark
// (jsontext.AppendSource).
func appendSourceJSON(b []byte, f symbolize.Frame) []byte {
	return jsontext.AppendSource(b, f.File, f.Line, f.Inlined)
}
