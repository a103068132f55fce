package argspec

import (
	"debug/elf"
	"testing"
)

// BenchmarkParse parses every argument string of OpenJDK 17's libjvm.so
// (531 notes, 1,100 arguments) per iteration; allocs/op is therefore per
// 531 Parse calls (one slice each, none for the 95 notes without
// arguments).
func BenchmarkParse(b *testing.B) {
	notes := readNotes(b, "libjvm17.args")
	args := 0
	for _, n := range notes {
		a, err := Parse(elf.EM_X86_64, n.args)
		if err != nil {
			b.Fatal(err)
		}
		args += len(a)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		for _, n := range notes {
			if _, err := Parse(elf.EM_X86_64, n.args); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(args), "ns/arg")
}

// BenchmarkFormat writes the same arguments back in canonical form.
func BenchmarkFormat(b *testing.B) {
	var all [][]Arg
	for _, n := range readNotes(b, "libjvm17.args") {
		a, err := Parse(elf.EM_X86_64, n.args)
		if err != nil {
			b.Fatal(err)
		}
		all = append(all, a)
	}
	b.ReportAllocs()
	for b.Loop() {
		for _, a := range all {
			_ = Format(a)
		}
	}
}
