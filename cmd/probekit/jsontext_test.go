package main

import (
	"bytes"
	"encoding/json"
	"testing"
)

// appendJSON writes what encoding/json writes, byte for byte, with and
// without HTML escapes, for strings and byte slices alike.
func FuzzAppendJSON(f *testing.F) {
	for _, s := range []string{"", "sample", "<string>", "a&b>c", "quote\" back\\ tab\t nl\n \b\f\r \x01\x1f",
		"\xff\xfe", "é€𝄞", "\u2028\u2029", "cut \xe2\x82", "\x00nul"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		html, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		var plain bytes.Buffer
		enc := json.NewEncoder(&plain)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
		noHTML := bytes.TrimSuffix(plain.Bytes(), []byte("\n"))
		for _, c := range []struct {
			got, want []byte
		}{
			{appendJSON(nil, s, true), html},
			{appendJSON(nil, []byte(s), true), html},
			{appendJSON(nil, s, false), noHTML},
			{appendJSON([]byte("x"), []byte(s), false)[1:], noHTML},
		} {
			if !bytes.Equal(c.got, c.want) {
				t.Fatalf("%q: %s, encoding/json %s", s, c.got, c.want)
			}
		}
	})
}
