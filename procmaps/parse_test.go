package procmaps

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestParseLine(t *testing.T) {
	fe00 := unix.Mkdev(0xfe, 0)
	for _, tc := range []struct {
		line string
		want Mapping
	}{
		{
			"55d29de5b000-55d29de5c000 r-xp 00001000 fe:00 5308512                    /srv/fixture/bin/usdt_lib_user",
			Mapping{Start: 0x55d29de5b000, End: 0x55d29de5c000, Offset: 0x1000, Perms: Read | Exec,
				Dev: fe00, Inode: 5308512, Path: "/srv/fixture/bin/usdt_lib_user"},
		},
		{ // anonymous: the kernel leaves a space after the inode
			"7fdb78c2c000-7fdb78c2f000 rw-p 00000000 00:00 0 ",
			Mapping{Start: 0x7fdb78c2c000, End: 0x7fdb78c2f000, Perms: Read | Write},
		},
		{ // and without it
			"7fdb78c2c000-7fdb78c2f000 rw-p 00000000 00:00 0",
			Mapping{Start: 0x7fdb78c2c000, End: 0x7fdb78c2f000, Perms: Read | Write},
		},
		{
			"7ffd1b1e6000-7ffd1b1e8000 r-xp 00000000 00:00 0                          [vdso]",
			Mapping{Start: 0x7ffd1b1e6000, End: 0x7ffd1b1e8000, Perms: Read | Exec, Path: "[vdso]"},
		},
		{ // prctl(PR_SET_VMA_ANON_NAME) names may hold spaces
			"7f0000000000-7f0000001000 rw-p 00000000 00:00 0                          [anon:my  arena 1]",
			Mapping{Start: 0x7f0000000000, End: 0x7f0000001000, Perms: Read | Write, Path: "[anon:my  arena 1]"},
		},
		{ // procfs's strings.Fields would give "/tmp/a b/lib c.so"
			"7f0000000000-7f0000001000 r--p 00002000 08:01 42                         /tmp/a  b/lib   c.so ",
			Mapping{Start: 0x7f0000000000, End: 0x7f0000001000, Offset: 0x2000, Perms: Read,
				Dev: unix.Mkdev(8, 1), Inode: 42, Path: "/tmp/a  b/lib   c.so "},
		},
		{
			"7f0000000000-7f0000001000 r-xs 00000000 00:01 1027                       /memfd:jit (deleted)",
			Mapping{Start: 0x7f0000000000, End: 0x7f0000001000, Perms: Read | Exec | Shared,
				Dev: unix.Mkdev(0, 1), Inode: 1027, Path: "/memfd:jit", Deleted: true},
		},
		{
			"7f0000000000-7f0000001000 r-xp 00001000 fe:00 99                         /opt/app/lib x.so (deleted)",
			Mapping{Start: 0x7f0000000000, End: 0x7f0000001000, Offset: 0x1000, Perms: Read | Exec,
				Dev: fe00, Inode: 99, Path: "/opt/app/lib x.so", Deleted: true},
		},
		{ // large device numbers (major 12 bits, minor 20 bits) and inode
			"ffffffffff600000-ffffffffff601000 --xp 00000000 fff:fffff 18446744073709551615 /x",
			Mapping{Start: 0xffffffffff600000, End: 0xffffffffff601000, Perms: Exec,
				Dev: unix.Mkdev(0xfff, 0xfffff), Inode: 1<<64 - 1, Path: "/x"},
		},
		{
			"7f0000000000-7f0000001000 ---p 00000000 00:00 0                          anon_inode:[perf_event]",
			Mapping{Start: 0x7f0000000000, End: 0x7f0000001000, Path: "anon_inode:[perf_event]"},
		},
	} {
		got, err := ParseLine(tc.line)
		if err != nil {
			t.Errorf("%q: %v", tc.line, err)
			continue
		}
		if got != tc.want {
			t.Errorf("%q:\n got %+v\nwant %+v", tc.line, got, tc.want)
		}
	}
}

func TestParseLineRejects(t *testing.T) {
	for _, tc := range []struct{ line, field string }{
		{"", "start address"},
		{"55d29de5b000", "start address"},
		{"55d29de5b000-", "end address"},
		{"55d29de5b000-55d29de5c000", "end address"},
		{"55d29de5c000-55d29de5b000 r-xp 00001000 fe:00 1 /x", "address range"}, // start > end
		{"55d29de5b000-55d29de5b000 r-xp 00001000 fe:00 1 /x", "address range"}, // empty
		{"55d29de5b001-55d29de5c000 r-xp 00001000 fe:00 1 /x", "address range"}, // unaligned
		{"g5d29de5b000-55d29de5c000 r-xp 00001000 fe:00 1 /x", "start address"},
		{"10000000000000000-20000000000000000 r-xp 0 fe:00 1 /x", "start address"}, // > 64 bits
		{"1000-2000 rwx 00001000 fe:00 1 /x", "permissions"},
		{"1000-2000 rwxq 00001000 fe:00 1 /x", "permissions"},
		{"1000-2000 xwrp 00001000 fe:00 1 /x", "permissions"},
		{"1000-2000 r-xpp 00001000 fe:00 1 /x", "permissions"},
		{"1000-2000 r-xp", "offset"},
		{"1000-2000 r-xp 00001001 fe:00 1 /x", "offset"},
		{"1000-2000 r-xp fffffffffffff000 fe:00 1 /x", "offset"}, // offset+size overflows
		{"1000-2000 r-xp 00001000", "offset"},
		{"1000-2000 r-xp 00001000 fe.00 1 /x", "device"},
		{"1000-2000 r-xp 00001000 1fd.01 1 /x", "device"},
		{"1000-2000 r-xp 00001000 1000:00 1 /x", "device"},
		{"1000-2000 r-xp 00001000 fe:100000 1 /x", "device"},
		{"1000-2000 r-xp 00001000 fe:00", "device"},
		{"1000-2000 r-xp 00001000 fe:00 ", "inode"},
		{"1000-2000 r-xp 00001000 fe:00 12a /x", "inode"},
		{"1000-2000 r-xp 00001000 fe:00 -1 /x", "inode"},
		{"1000-2000 r-xp 00001000 fe:00 18446744073709551616 /x", "inode"},
		{"1000-2000 r-xp 00001000 fe:00 1 /" + strings.Repeat("a", maxLineLen), "line"},
	} {
		_, err := ParseLine(tc.line)
		if !errors.Is(err, ErrBadLine) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%.60q: got %v, want ErrBadLine naming %q", tc.line, err, tc.field)
		}
	}
}

func TestParseMapsCountsBadLines(t *testing.T) {
	input := strings.Join([]string{
		"1000-2000 r-xp 00000000 fe:00 7 /bin/a",
		"garbage",
		"2000-3000 r--p 00001000 fe:00 7 /bin/a",
		"1000-2000 r-xp 00001000 fe:00 1 /" + strings.Repeat("b", 3*maxLineLen), // over-long
		"",
		"3000-4000 rw-p 00000000 00:00 0 ",
		"4000-5000 rw-p 00002000 fe:00 7 /bin/a", // no final newline
	}, "\n")
	maps, bad, err := ParseMaps(strings.NewReader(input))
	if err != nil {
		t.Fatal(err)
	}
	if bad != 2 {
		t.Errorf("bad = %d, want 2", bad)
	}
	var starts []uint64
	for _, m := range maps {
		starts = append(starts, m.Start)
	}
	if want := []uint64{0x1000, 0x2000, 0x3000, 0x4000}; !reflect.DeepEqual(starts, want) {
		t.Errorf("starts %#x, want %#x", starts, want)
	}
}

func TestParseMapsReadError(t *testing.T) {
	want := errors.New("boom")
	r := &failingReader{data: "1000-2000 r-xp 00000000 fe:00 7 /bin/a\n", err: want}
	maps, _, err := ParseMaps(r)
	if !errors.Is(err, want) || len(maps) != 1 {
		t.Fatalf("got %d mappings, %v; want 1 and %v", len(maps), err, want)
	}
}

type failingReader struct {
	data string
	err  error
}

func (r *failingReader) Read(p []byte) (int, error) {
	if r.data == "" {
		return 0, r.err
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

// TestParseMapsGolden parses real maps files: every line parses and the
// objects come out as the kernel laid them out.
func TestParseMapsGolden(t *testing.T) {
	for _, tc := range []struct {
		file            string
		lines, objects  int
		firstObj        string
		firstObjMapping int
	}{
		{"maps-usdt_lib_user.txt", 29, 4, "/srv/fixture/bin/usdt_lib_user", 5},
		{"maps-python3.11.txt", 43, 8, "/usr/bin/python3.11", 5},
	} {
		data, err := os.ReadFile(filepath.Join("testdata", tc.file))
		if err != nil {
			t.Fatal(err)
		}
		maps, bad, err := ParseMaps(strings.NewReader(string(data)))
		if err != nil || bad != 0 || len(maps) != tc.lines {
			t.Fatalf("%s: %d mappings, %d bad, %v; want %d, 0, nil", tc.file, len(maps), bad, err, tc.lines)
		}
		objs := groupObjects(maps)
		if len(objs) != tc.objects || objs[0].Path != tc.firstObj || len(objs[0].Mappings) != tc.firstObjMapping {
			t.Errorf("%s: %d objects, first %q with %d mappings", tc.file, len(objs), objs[0].Path, len(objs[0].Mappings))
		}
	}
}

func TestAddressTranslation(t *testing.T) {
	// usdt_lib_user's layout: file page 0x2000 is mapped twice (.rodata,
	// and the RELRO start of the data segment), both read-only.
	data, err := os.ReadFile(filepath.Join("testdata", "maps-usdt_lib_user.txt"))
	if err != nil {
		t.Fatal(err)
	}
	maps, _, _ := ParseMaps(strings.NewReader(string(data)))
	o := groupObjects(maps)[0]
	for _, tc := range []struct {
		off  uint64
		need Perms
		want uint64
		err  error
	}{
		{0x1a95, Exec, 0x55d29de5b000 + 0xa95, nil},
		{0x1a95, 0, 0x55d29de5b000 + 0xa95, nil},
		{0x1a95, Write, 0, ErrNotMapped},
		{0x3058, Write, 0x55d29de5e058, nil},
		{0x2010, Read, 0, ErrAmbiguous},
		{0x0, Read, 0x55d29de5a000, nil},
		{0x5000, 0, 0, ErrNotMapped},
	} {
		got, err := o.Address(tc.off, tc.need)
		if got != tc.want || !errors.Is(err, tc.err) {
			t.Errorf("Address(%#x, %v) = %#x, %v; want %#x, %v", tc.off, tc.need, got, err, tc.want, tc.err)
		}
		if err == nil {
			back, err := o.FileOffset(got)
			if err != nil || back != tc.off {
				t.Errorf("FileOffset(%#x) = %#x, %v; want %#x", got, back, err, tc.off)
			}
		}
	}
	if _, err := o.FileOffset(0x1000); !errors.Is(err, ErrNotMapped) {
		t.Errorf("FileOffset outside: %v", err)
	}
}

// formatLine writes m as the kernel does, so parsing it gives m back.
func formatLine(m Mapping) string {
	s := fmt.Sprintf("%08x-%08x %v %08x %02x:%02x %d ", m.Start, m.End, m.Perms, m.Offset,
		unix.Major(m.Dev), unix.Minor(m.Dev), m.Inode)
	if m.Path != "" {
		s += strings.Repeat(" ", max(0, 73-len(s))) + m.Path
		if m.Deleted {
			s += deletedSuffix
		}
	}
	return s
}

func FuzzParseLine(f *testing.F) {
	for _, name := range []string{"maps-usdt_lib_user.txt", "maps-python3.11.txt"} {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			f.Add(line)
		}
	}
	f.Add("7f0000000000-7f0000001000 r-xs 00000000 00:01 1027                       /memfd:jit (deleted)")
	f.Add("7f0000000000-7f0000001000 rw-p 00000000 00:00 0                          [anon:my  arena 1]")
	f.Add("1000-2000 r-xp 00001000 1fd.01 1 /x")
	f.Fuzz(func(t *testing.T, line string) {
		m, err := ParseLine(line)
		if err != nil {
			if !errors.Is(err, ErrBadLine) {
				t.Fatalf("error %v does not wrap ErrBadLine", err)
			}
			return
		}
		if m.Start >= m.End || m.Start%pageAlign != 0 || m.End%pageAlign != 0 || m.Offset%pageAlign != 0 {
			t.Fatalf("accepted a bad range: %+v", m)
		}
		if m.Perms >= 1<<4 {
			t.Fatalf("bad perms %d", m.Perms)
		}
		if m.Offset+m.Size() < m.Offset {
			t.Fatalf("offset range overflows: %+v", m)
		}
		if m.Path == "" && m.Deleted {
			t.Fatalf("deleted without a path: %+v", m)
		}
		again, err := ParseLine(formatLine(m))
		if err != nil || again != m {
			t.Fatalf("round trip of %+v: %+v, %v", m, again, err)
		}
	})
}

func FuzzParseMaps(f *testing.F) {
	for _, name := range []string{"maps-usdt_lib_user.txt", "maps-python3.11.txt"} {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("1000-2000 r-xp 0 fe:00 1 /a\n\n\ngarbage\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		maps, bad, err := ParseMaps(strings.NewReader(string(data)))
		if err != nil {
			t.Fatal(err)
		}
		if lines := strings.Count(string(data), "\n") + 1; len(maps)+bad > lines {
			t.Fatalf("%d mappings + %d bad > %d lines", len(maps), bad, lines)
		}
		for _, o := range groupObjects(maps) {
			if len(o.Mappings) > 64 {
				continue // keep the quadratic checks fast
			}
			overlapping := overlaps(o.Mappings)
			for _, m := range o.Mappings {
				a, err := o.Address(m.Offset, m.Perms)
				if err != nil {
					if !errors.Is(err, ErrAmbiguous) {
						t.Fatalf("Address of a mapping's own offset: %v", err)
					}
					continue
				}
				if off, err := o.FileOffset(a); err != nil || (off != m.Offset && !overlapping) {
					t.Fatalf("round trip %#x -> %#x -> %#x, %v", m.Offset, a, off, err)
				}
			}
		}
	})
}

// overlaps reports whether mappings overlap in address (fuzzed input
// can; the kernel's cannot), which makes FileOffset's answer depend on
// which one comes first.
func overlaps(ms []Mapping) bool {
	for i := range ms {
		for j := range i {
			if ms[i].Start < ms[j].End && ms[j].Start < ms[i].End {
				return true
			}
		}
	}
	return false
}
