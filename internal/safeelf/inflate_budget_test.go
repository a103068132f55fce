package safeelf

import (
	"bytes"
	"debug/elf"
	"errors"
	"os"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// TestInflateBudget: a small file whose ten sections each decompress to
// 32 MiB of zeros (one zstd stream of a few KB, shared) yields at most
// InflateFloor in all: the sections past it fail with ErrInflateBudget.
// A section claiming 1 GiB in it is refused before any decompression.
// The old reader decompressed all ten (320 MiB from a file of 30 KB).
func TestInflateBudget(t *testing.T) {
	const each = 32 << 20
	data, err := os.ReadFile(dbgFixture("dbg_v5.zstd.debug"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := NewFile(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	stream := enc.EncodeAll(make([]byte, each), nil)
	enc.Close()
	bo := f.ByteOrder
	chdr := make([]byte, chdr64Size)
	bo.PutUint32(chdr, uint32(elf.COMPRESS_ZSTD))
	bo.PutUint64(chdr[8:], each)
	bo.PutUint64(chdr[16:], 1)
	off := uint64(len(data))
	b := append(bytes.Clone(data), chdr...)
	b = append(b, stream...)
	var names []string
	for i := range f.Sections {
		s := &f.Sections[i]
		if s.Type == elf.SHT_NULL || s.Flags&elf.SHF_ALLOC != 0 || len(names) == 10 {
			continue
		}
		sh := s.HeaderOff
		bo.PutUint64(b[sh+8:], uint64(elf.SHF_COMPRESSED))
		bo.PutUint64(b[sh+24:], off)
		bo.PutUint64(b[sh+32:], uint64(chdr64Size+len(stream)))
		names = append(names, s.Name)
	}
	if len(names) < 10 {
		t.Fatalf("%d sections to patch, want 10", len(names))
	}
	hf, err := NewFile(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	var total, refused int
	for _, n := range names {
		d, err := hf.SectionData(hf.Section(n), 1<<30)
		switch {
		case err == nil && len(d) == each:
			total += len(d)
		case errors.Is(err, ErrInflateBudget):
			refused++
		default:
			t.Fatalf("%s: %d bytes, %v", n, len(d), err)
		}
	}
	if total > InflateFloor || refused == 0 || hf.Inflated() != uint64(total) {
		t.Fatalf("file of %d bytes: %d bytes decompressed (%d counted), %d sections refused; want at most %d", len(b), total, hf.Inflated(), refused, InflateFloor)
	}
	t.Logf("file of %d bytes: %d MiB decompressed, %d of %d sections refused", len(b), total>>20, refused, len(names))

	// One section claiming 1 GiB: refused from its header.
	bo.PutUint64(b[off+8:], 1<<30)
	hf, err = NewFile(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hf.SectionData(hf.Section(names[0]), 1<<30); !errors.Is(err, ErrInflateBudget) {
		t.Fatalf("a section claiming 1 GiB: %v, want ErrInflateBudget", err)
	}
}
