package debuginfo

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/probekit/probekit/internal/test/elftest"
	"github.com/probekit/probekit/internal/test/testkit"
)

var miniFixture = filepath.Join(testkit.Root(), "testdata", "debuginfo", "bin", "mini")

// miniSection returns the fixture's .gnu_debugdata bytes.
func miniSection(t testing.TB) []byte {
	t.Helper()
	f := elftest.Open(t, miniFixture)
	s := f.Section(".gnu_debugdata")
	if s == nil {
		t.Fatal("fixture has no .gnu_debugdata")
	}
	b, err := f.ReadAt(s.Offset, s.Size, s.Size)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestMiniDebugInfo: the fixture's embedded file holds mini_static at the
// address of the full .symtab, and the function table of the stripped
// object gains it (FunctionsFrom names the section as its source).
func TestMiniDebugInfo(t *testing.T) {
	ef := elftest.Open(t, miniFixture)
	mini, err := MiniDebugInfo(ef)
	if err != nil {
		t.Fatal(err)
	}
	syms, err := mini.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	want := testkit.FunctionValue(t, miniFixture+".debug", "mini_static")
	var got uint64
	syms.Lookup("mini_static", func(i int) bool { got = syms.Value(i); return false })
	if got != want {
		t.Fatalf("mini_static in .gnu_debugdata at %#x, the full .symtab says %#x", got, want)
	}

	obj, err := os.Open(miniFixture)
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	funcs, from, err := FunctionsFrom(ef, obj, miniFixture, &Options{Offline: true, DebugDirs: []string{t.TempDir()}})
	if err != nil || from != miniFixture+"[.gnu_debugdata]" || !funcs.SymtabFromDebug {
		t.Fatalf("FunctionsFrom: from %q, symtab from debug %v, %v", from, funcs != nil && funcs.SymtabFromDebug, err)
	}

	// An object without the section.
	if _, err := MiniDebugInfo(elftest.Open(t, testkit.Fixture("usdt_sample"))); !errors.Is(err, ErrNoMiniDebugInfo) {
		t.Fatalf("usdt_sample: %v, want ErrNoMiniDebugInfo", err)
	}
}

// TestMiniDebugInfoHostile: broken or oversized xz framing is refused with
// a located error before the decoder allocates.
func TestMiniDebugInfoHostile(t *testing.T) {
	good := miniSection(t)
	if _, err := decompressMini(good); err != nil {
		t.Fatalf("the fixture's own section: %v", err)
	}
	// The first block header follows the 12-byte stream header; its
	// LZMA2 property byte is its last byte before padding and CRC32.
	blockHdr := func(b []byte) []byte { return b[12 : 12+(int(b[12])+1)*4] }
	dictAt := func(b []byte) int {
		h := blockHdr(b)
		i := bytes.Index(h, []byte{0x21, 0x01})
		if i < 0 {
			t.Fatal("no LZMA2 filter in the first block header")
		}
		return 12 + i + 2
	}
	mutate := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	cases := []struct {
		name, want string
		data       []byte
	}{
		{"empty", "no xz stream header", nil},
		{"not xz", "no xz stream header", bytes.Repeat([]byte{0x41}, 64)},
		{"truncated", "no stream footer", good[:len(good)-5]},
		{"huge dictionary", "LZMA2 dictionary", mutate(func(b []byte) []byte { b[dictAt(b)] = 39; return b })},
		{"dictionary code 41", "dictionary code", mutate(func(b []byte) []byte { b[dictAt(b)] = 41; return b })},
		{"index past start", "does not fit", mutate(func(b []byte) []byte {
			binary.LittleEndian.PutUint32(b[len(b)-8:], 1<<30)
			return b
		})},
		{"flags differ", "stream flags", mutate(func(b []byte) []byte { b[len(b)-3] ^= 0x01; return b })},
		// An index that understates the stream's output (its CRC32
		// made right) does not lift the bound: decoding stops one byte
		// past what the index says (issue 37, item 12).
		{"index understates", "its index says 128", mutate(func(b []byte) []byte {
			backward := (int(binary.LittleEndian.Uint32(b[len(b)-8:])) + 1) * 4
			idx := b[len(b)-12-backward : len(b)-12]
			p := 1
			n, _ := binary.Uvarint(idx[p:])
			if n != 1 {
				t.Fatalf("%d index records, want 1", n)
			}
			p += uvarintLen(n)
			unpadded, _ := binary.Uvarint(idx[p:])
			p += uvarintLen(unpadded)
			size, _ := binary.Uvarint(idx[p:])
			// The least size of the same length: 128 in two bytes.
			w := uvarintLen(size)
			less := uint64(1) << (7 * (w - 1))
			if w < 2 || less != 128 {
				t.Fatalf("uncompressed size %d: want one of two bytes", size)
			}
			enc := binary.AppendUvarint(nil, less)
			copy(idx[p:], enc)
			binary.LittleEndian.PutUint32(idx[len(idx)-4:], crc32.ChecksumIEEE(idx[:len(idx)-4]))
			return b
		})},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := decompressMini(c.data)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("%v, want an error saying %q", err, c.want)
			}
		})
	}
}

// FuzzMiniDebugInfo feeds mutated .gnu_debugdata sections: an error or a
// bounded result, never a panic.
func FuzzMiniDebugInfo(f *testing.F) {
	f.Add(miniSection(f))
	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := decompressMini(data)
		if err == nil && len(out) > maxMiniUncompressed {
			t.Fatalf("%d bytes out", len(out))
		}
	})
}

// uvarintLen is the length of n as an xz (and Go) varint.
func uvarintLen(n uint64) int {
	return len(binary.AppendUvarint(nil, n))
}
