package procmaps

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func BenchmarkParseMaps(b *testing.B) {
	data, err := os.ReadFile(filepath.Join("testdata", "maps-python3.11.txt"))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, bad, err := ParseMaps(strings.NewReader(string(data))); err != nil || bad != 0 {
			b.Fatal(bad, err)
		}
	}
}
