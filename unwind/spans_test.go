package unwind

import (
	"testing"

	"github.com/probekit/probekit/internal/test/elftest"
)

// Spans gives, over each FDE, contiguous rows in address order, each
// equal to what Find computes at its first and last addresses.
func TestSpans(t *testing.T) {
	for _, path := range []string{libc, "/usr/bin/python3.11"} {
		tab, err := Load(elftest.Open(t, path))
		if err != nil {
			t.Fatal(err)
		}
		var prevEnd uint64
		n := 0
		tab.Spans(func(s Span) bool {
			n++
			if s.Start >= s.End || s.Start < prevEnd && s.Start != tab.fdes[0].start {
				t.Fatalf("%s: span [%#x, %#x) after %#x", path, s.Start, s.End, prevEnd)
			}
			if s.Err != nil {
				t.Errorf("%s: span at %#x: %v", path, s.Start, s.Err)
				return false
			}
			for _, pc := range []uint64{s.Start, s.End - 1} {
				row, err := tab.Find(pc)
				if err != nil || row != *s.Row {
					t.Fatalf("%s: Find(%#x) %+v, %v; span [%#x, %#x) %+v", path, pc, row.CFA, err, s.Start, s.End, s.Row.CFA)
				}
			}
			prevEnd = s.End
			return true
		})
		if n < tab.Len() {
			t.Errorf("%s: %d spans for %d FDEs", path, n, tab.Len())
		}
	}
}
