package debuginfo

import (
	"bytes"
	"os"
	"testing"

	"github.com/probekit/probekit/internal/safeelf"
)

// TestSectionsDigest: the digest changes with one byte of a DWARF
// section and with one byte of .symtab, not with a byte of .text (which
// a line index does not read).
func TestSectionsDigest(t *testing.T) {
	b, err := os.ReadFile(linesFixture("lines_c_v5"))
	if err != nil {
		t.Fatal(err)
	}
	digest := func(b []byte) ([]byte, error) {
		f, err := safeelf.NewFile(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		return SectionsDigest(f, nil)
	}
	f, err := safeelf.NewFile(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	base, err := digest(b)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		sec  string
		same bool
	}{{".debug_info", false}, {".debug_line_str", false}, {".symtab", false}, {".strtab", false}, {".text", true}} {
		s := f.Section(c.sec)
		if s == nil {
			t.Fatalf("no %s", c.sec)
		}
		m := bytes.Clone(b)
		m[s.Offset+s.Size/2] ^= 1
		d, err := digest(m)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Equal(d, base) != c.same {
			t.Errorf("one byte of %s changed: digest the same %v, want %v", c.sec, !c.same, c.same)
		}
	}
}

// FuzzSectionsDigest: a hostile ELF file never panics SectionsDigest,
// whose memory does not grow with the sizes its headers claim.
func FuzzSectionsDigest(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		ef, err := safeelf.NewFile(bytes.NewReader(data))
		if err != nil {
			return
		}
		SectionsDigest(ef)
	})
}
