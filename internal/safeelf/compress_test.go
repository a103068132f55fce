package safeelf

import (
	"bytes"
	"debug/elf"
	"encoding/hex"
	"errors"
	"hash/crc32"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/probekit/probekit/internal/test/testkit"
)

// dbgFixture is a debuginfo fixture (testdata/debuginfo/bin).
func dbgFixture(name string) string {
	return filepath.Join(testkit.Root(), "testdata", "debuginfo", "bin", name)
}

func openFixture(t *testing.T, path string) (*File, []byte) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := NewFile(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	return f, data
}

// TestCompressedSections: every DWARF section of the zlib, zstd and
// legacy .zdebug copies of a debug file decompresses to the bytes of the
// uncompressed file, and to what debug/elf's own decoder gives.
func TestCompressedSections(t *testing.T) {
	plain, _ := openFixture(t, dbgFixture("dbg_v5.debug"))
	for _, variant := range []string{"zlib", "zstd", "gnu"} {
		t.Run(variant, func(t *testing.T) {
			path := dbgFixture("dbg_v5." + variant + ".debug")
			f, _ := openFixture(t, path)
			std, err := elf.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer std.Close()
			compressed := 0
			for _, s := range plain.Sections {
				if !strings.HasPrefix(s.Name, ".debug_") {
					continue
				}
				want, err := plain.SectionData(&s, 1<<30)
				if err != nil {
					t.Fatal(err)
				}
				got, err := f.DebugSection(s.Name, 1<<30)
				if err != nil {
					t.Fatalf("%s: %v", s.Name, err)
				}
				if !bytes.Equal(got, want) {
					t.Errorf("%s: %d bytes differ from the plain file's %d", s.Name, len(got), len(want))
				}
				name := s.Name
				cs := f.Section(name)
				if cs == nil {
					name = ".z" + name[1:]
					cs = f.Section(name)
				}
				if cs.Flags&elf.SHF_COMPRESSED != 0 || strings.HasPrefix(name, ".zdebug") {
					compressed++
				}
				if ss := std.Section(name); ss != nil {
					if d, err := ss.Data(); err == nil && !bytes.Equal(d, got) {
						t.Errorf("%s: debug/elf decodes %d bytes, SectionData %d", name, len(d), len(got))
					}
				}
			}
			if compressed == 0 {
				t.Fatalf("%s has no compressed section: the fixture is not what its name says", path)
			}
		})
	}
}

// TestLibcDebugSections: Debian's libc6-dbg debug file is zlib-compressed
// (readelf -S shows flag C); its .debug_info decompresses to what
// debug/elf decodes, larger than on disk.
func TestLibcDebugSections(t *testing.T) {
	path := testkit.LibcDebugFile(t)
	f, _ := openFixture(t, path)
	s := f.Section(".debug_info")
	if s == nil || s.Flags&elf.SHF_COMPRESSED == 0 {
		t.Fatalf("%s: .debug_info not SHF_COMPRESSED", path)
	}
	data, err := f.SectionData(s, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	std, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer std.Close()
	want, err := std.Section(".debug_info").Data()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data, want) || len(data) <= int(s.Size) {
		t.Fatalf(".debug_info: %d bytes (on disk %d), debug/elf %d", len(data), s.Size, len(want))
	}
	if _, err := f.SectionData(s, uint64(len(data))-1); err == nil {
		t.Fatal("a ceiling below the uncompressed size was not enforced")
	}
}

// TestHostileCompressed: a size header that lies, a truncated or garbage
// stream, an unknown type, a compressed SHF_ALLOC section and a size
// beyond the ceiling each give a *FormatError at the section, with no
// allocation of the claimed size.
func TestHostileCompressed(t *testing.T) {
	for _, variant := range []string{"zlib", "zstd"} {
		path := dbgFixture("dbg_v5." + variant + ".debug")
		f, data := openFixture(t, path)
		s := f.Section(".debug_info")
		bo := f.ByteOrder
		for _, tc := range []struct {
			name  string
			patch func(b []byte)
			limit uint64
			want  string
		}{
			{"size too large", func(b []byte) { bo.PutUint64(b[s.Offset+8:], bo.Uint64(b[s.Offset+8:])+1) }, 1 << 30, "holds"},
			{"size too small", func(b []byte) { bo.PutUint64(b[s.Offset+8:], bo.Uint64(b[s.Offset+8:])-1) }, 1 << 30, "more than"},
			{"size 1 TiB", func(b []byte) { bo.PutUint64(b[s.Offset+8:], 1<<40) }, 1 << 30, "exceeds"},
			{"unknown type", func(b []byte) { bo.PutUint32(b[s.Offset:], 77) }, 1 << 30, "unsupported"},
			{"garbage stream", func(b []byte) {
				for i := s.Offset + chdr64Size; i < s.Offset+s.Size; i++ {
					b[i] = byte(i * 31)
				}
			}, 1 << 30, ".debug_info"},
			{"truncated", func(b []byte) {
				sh := s.HeaderOff
				bo.PutUint64(b[sh+32:], s.Size/2)
			}, 1 << 30, "stream"},
			{"SHF_ALLOC", func(b []byte) {
				sh := s.HeaderOff
				bo.PutUint64(b[sh+8:], uint64(elf.SHF_COMPRESSED|elf.SHF_ALLOC))
			}, 1 << 30, "SHF_ALLOC"},
			{"below ceiling", func([]byte) {}, 16, "allowed"},
		} {
			t.Run(variant+"/"+tc.name, func(t *testing.T) {
				b := bytes.Clone(data)
				tc.patch(b)
				hf, err := NewFile(bytes.NewReader(b))
				if err != nil {
					t.Fatal(err)
				}
				before := testkit.HeapGrowth(func() {
					_, err = hf.SectionData(hf.Section(".debug_info"), tc.limit)
				})
				var fe *FormatError
				if !errors.As(err, &fe) || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("err = %v, want a *FormatError saying %q", err, tc.want)
				}
				if before > 64<<20 {
					t.Errorf("heap grew %d bytes", before)
				}
			})
		}
	}
}

// TestBuildIDAndDebugLink: the build ID and debuglink read here are those
// readelf prints, and the ID of a stripped file equals its debug file's.
func TestBuildIDAndDebugLink(t *testing.T) {
	for _, name := range []string{"dbg_v5", "dbg_v4", "dbg_id"} {
		path := dbgFixture(name)
		out, err := exec.Command("readelf", "-n", "--string-dump=.gnu_debuglink", path).CombinedOutput()
		if err != nil && name != "dbg_id" {
			t.Fatalf("readelf: %v\n%s", err, out)
		}
		f, _ := openFixture(t, path)
		id, err := f.BuildID()
		if err != nil || len(id) != 20 {
			t.Fatalf("%s: build ID %x, %v", name, id, err)
		}
		if !strings.Contains(string(out), "Build ID: "+hex.EncodeToString(id)) {
			t.Errorf("%s: build ID %x not in readelf's output:\n%s", name, id, out)
		}
		dbg, _ := openFixture(t, path+".debug")
		if did, err := dbg.BuildID(); err != nil || !bytes.Equal(did, id) {
			t.Errorf("%s.debug: build ID %x (%v), the object's %x", name, did, err, id)
		}
		link, crc, ok, err := f.DebugLink()
		if err != nil {
			t.Fatal(err)
		}
		if name == "dbg_id" {
			if ok {
				t.Errorf("dbg_id has a debuglink %q", link)
			}
			continue
		}
		if !ok || link != name+".debug" || !strings.Contains(string(out), link) {
			t.Errorf("%s: debuglink %q %v", name, link, ok)
		}
		if want := crcOf(t, path+".debug"); crc != want {
			t.Errorf("%s: debuglink CRC %#x, the debug file's %#x", name, crc, want)
		}
	}
}

// crcOf is the CRC-32 objcopy records, computed by Go's own table.
func crcOf(t *testing.T, path string) uint32 {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return crc32IEEE(b)
}

func crc32IEEE(b []byte) uint32 { return crc32.ChecksumIEEE(b) }
