package unwind

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/probekit/probekit/internal/test/elftest"
)

// BenchmarkLoad loads the CFI of Debian's libc, python3.11 and
// OpenJDK 17's libjvm: table-bytes is the memory the table holds
// (Table.Size: the section plus the FDE index), fdes the FDE count.
func BenchmarkLoad(b *testing.B) {
	for _, path := range []string{libc, "/usr/bin/python3.11", "/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so"} {
		b.Run(filepath.Base(path), func(b *testing.B) {
			if _, err := os.Stat(path); err != nil {
				b.Skip(err)
			}
			f := elftest.Open(b, path)
			var t *Table
			for b.Loop() {
				var err error
				if t, err = Load(f); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(t.Size), "table-bytes")
			b.ReportMetric(float64(t.Len()), "fdes")
		})
	}
}

// BenchmarkFind is one row look-up in libc's table, over its FDEs in
// turn (the CIE's and the FDE's instructions run up to the address).
func BenchmarkFind(b *testing.B) {
	t, err := Load(elftest.Open(b, libc))
	if err != nil {
		b.Fatal(err)
	}
	i := 0
	for b.Loop() {
		e := &t.fdes[i%len(t.fdes)]
		if _, err := t.Find(e.start + (e.end-e.start)/2); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
