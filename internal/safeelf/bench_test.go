package safeelf

import (
	"os"
	"path/filepath"
	"testing"
)

// Large real targets: Node's ~107k .symtab and ~75k .dynsym entries,
// libjvm.so's C++ symbols.
var largeTargets = []string{
	"/usr/bin/node",
	"/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so",
}

// BenchmarkFunctions opens a file and reads its functions: what listing
// or probing a function costs before the first lookup.
func BenchmarkFunctions(b *testing.B) {
	for _, path := range largeTargets {
		b.Run(filepath.Base(path), func(b *testing.B) {
			fd, err := os.Open(path)
			if err != nil {
				b.Skipf("%s absent: %v", path, err)
			}
			defer fd.Close()
			b.ReportAllocs()
			for b.Loop() {
				f, err := NewFile(fd)
				if err != nil {
					b.Fatal(err)
				}
				fns, err := f.Functions()
				if err != nil {
					b.Fatal(err)
				}
				if fns.Len() == 0 {
					b.Fatal("no functions")
				}
			}
		})
	}
}

// BenchmarkLookup: one exact-name lookup after the index is built, and
// the first lookup including the index build.
func BenchmarkLookup(b *testing.B) {
	path := largeTargets[0]
	fd, err := os.Open(path)
	if err != nil {
		b.Skipf("%s absent: %v", path, err)
	}
	defer fd.Close()
	f, err := NewFile(fd)
	if err != nil {
		b.Fatal(err)
	}
	fns, err := f.Functions()
	if err != nil {
		b.Fatal(err)
	}
	find := func(fns *Funcs) {
		found := false
		fns.Lookup("uv_fs_open", func(int) bool { found = true; return false })
		if !found {
			b.Fatal("uv_fs_open not found")
		}
	}
	b.Run("indexed", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			find(fns)
		}
	})
	b.Run("first", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			fns, err := f.Functions()
			if err != nil {
				b.Fatal(err)
			}
			find(fns)
		}
	})
	b.Run("At", func(b *testing.B) {
		b.ReportAllocs()
		addr := fns.Address(fns.Len()/2) + 1
		for b.Loop() {
			if _, ok := fns.At(addr); !ok {
				b.Fatal("no function")
			}
		}
	})
}
