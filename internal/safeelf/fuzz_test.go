package safeelf

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/probekit/probekit/internal/test/elfseed"
	"github.com/probekit/probekit/internal/test/testkit"
)

// maxFuzzSeed: the C fixtures whole (the Go ones are too large to mutate
// usefully), as regression inputs of go test; fuzzing starts from
// elfseed's small files alone (elfseed.Fuzzing). Inputs of 15-70 KiB make the fuzzer's minimisation of each
// new input take seconds, which its exec counter does not show;
// -fuzzminimizetime=0 keeps it fuzzing.
const maxFuzzSeed = 96 << 10

// FuzzSymbols feeds mutated fixtures to the symbol reader through every
// accessor: no panic, corruption is a *FormatError, and what is returned
// is consistent (each function lies in code, is found by its name and by
// its address).
func FuzzSymbols(f *testing.F) {
	elfseed.Each(func(_ string, b []byte) { f.Add(b) })
	files, _ := filepath.Glob(filepath.Join(testkit.Root(), "testdata", "bin", "*"))
	for _, path := range files {
		if b, err := os.ReadFile(path); err == nil && len(b) <= maxFuzzSeed && !elfseed.Fuzzing() {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		err := readAll(bytes.NewReader(data))
		var fe *FormatError
		if err != nil && !errors.As(err, &fe) {
			t.Fatalf("not a *FormatError: %v", err)
		}
		ef, err := NewFile(bytes.NewReader(data))
		if err != nil {
			return
		}
		fns, err := ef.Functions()
		if err != nil {
			return
		}
		loads := ef.Loads()
		for i := range fns.Len() {
			fn := fns.Func(i)
			if off, ok := loads.CodeOffset(fn.Address); !ok || off != fn.Offset {
				t.Fatalf("%s at %#x: offset %#x, CodeOffset %#x %v", fn, fn.Address, fn.Offset, off, ok)
			}
			found := false
			fns.Lookup(fn.Name, func(j int) bool { found = j == i; return !found })
			if !found {
				t.Fatalf("Lookup(%q) misses function %d", fn.Name, i)
			}
			if _, ok := fns.At(fn.Address); !ok {
				t.Fatalf("At(%#x) finds nothing", fn.Address)
			}
		}
	})
}

// FuzzDebugSections feeds mutated debug files (plain, zlib, zstd and
// .zdebug) to the readers of debug information: the build ID, the
// debuglink and every section decompressed under a ceiling. No panic;
// corruption is a *FormatError; a section that decodes is no larger than
// the ceiling.
func FuzzDebugSections(f *testing.F) {
	elfseed.Each(func(_ string, b []byte) { f.Add(b) })
	files, _ := filepath.Glob(filepath.Join(testkit.Root(), "testdata", "debuginfo", "bin", "*"))
	for _, path := range files {
		if b, err := os.ReadFile(path); err == nil && len(b) <= maxFuzzSeed && !elfseed.Fuzzing() {
			f.Add(b)
		}
	}
	const limit = 1 << 20
	f.Fuzz(func(t *testing.T, data []byte) {
		ef, err := NewFile(bytes.NewReader(data))
		if err != nil {
			return
		}
		var fe *FormatError
		if _, err := ef.BuildID(); err != nil && !errors.As(err, &fe) {
			t.Fatalf("BuildID: not a *FormatError: %v", err)
		}
		if _, _, _, err := ef.DebugLink(); err != nil && !errors.As(err, &fe) {
			t.Fatalf("DebugLink: not a *FormatError: %v", err)
		}
		for i := range ef.Sections {
			b, err := ef.SectionData(&ef.Sections[i], limit)
			if err != nil && !errors.As(err, &fe) {
				t.Fatalf("SectionData(%s): not a *FormatError: %v", ef.Sections[i].Name, err)
			}
			if len(b) > limit {
				t.Fatalf("SectionData(%s): %d bytes past the %d limit", ef.Sections[i].Name, len(b), limit)
			}
		}
	})
}
