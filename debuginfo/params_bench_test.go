package debuginfo

import (
	"testing"

	"github.com/probekit/probekit/internal/safeelf"
	"github.com/probekit/probekit/internal/test/testkit"
)

// BenchmarkLibcSignatures: the parameters of libc's functions from
// libc6-dbg's DWARF: opening it (decompressing the sections, the unit
// index), the first lookup in a unit (its subprogram index), and a
// lookup in a unit already indexed.
func BenchmarkLibcSignatures(b *testing.B) {
	path := testkit.LibcDebugFile(b)
	f := open(b, path)
	ef, err := safeelf.NewFile(f)
	if err != nil {
		b.Fatal(err)
	}
	lf := open(b, testkit.Libc)
	lef, err := safeelf.NewFile(lf)
	if err != nil {
		b.Fatal(err)
	}
	funcs, err := lef.Functions()
	if err != nil {
		b.Fatal(err)
	}
	var malloc uint64
	for i := range funcs.Len() {
		if funcs.Name(i) == "malloc" {
			malloc = funcs.Address(i)
		}
	}
	b.Run("open", func(b *testing.B) {
		for b.Loop() {
			if _, err := OpenSignaturesELF(ef); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("first", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			s, err := OpenSignaturesELF(ef)
			if err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			if _, err := s.At(malloc); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("warm", func(b *testing.B) {
		s, err := OpenSignaturesELF(ef)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.At(malloc); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, err := s.At(malloc); err != nil {
				b.Fatal(err)
			}
		}
	})
}
