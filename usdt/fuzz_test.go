package usdt

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/probekit/probekit/internal/test/elfseed"
	"github.com/probekit/probekit/internal/test/testkit"
)

// FuzzNotes: note bytes × class × byte order, through the note walker and
// through a whole file. No panic; an accepted note has a provider and a
// name.
func FuzzNotes(f *testing.F) {
	for _, class := range []elf.Class{elf.ELFCLASS32, elf.ELFCLASS64} {
		for _, bo := range []order{binary.LittleEndian, binary.BigEndian} {
			f.Add(encodeNotes(class, bo, []testNote{
				{location: testTextAddr, semaphore: testDataAddr, provider: "python", name: "function__entry", args: "8@%r14 8@%r15 -4@%eax"},
				{owner: "GNU", typ: 1, desc: []byte{1, 2, 3, 4}},
				{location: testTextAddr + 2, provider: "p", name: "n", args: ":"},
			}), class == elf.ELFCLASS32, bo == binary.BigEndian)
		}
	}
	f.Add([]byte{8, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 3, 0, 0, 0, 's', 't', 'a', 'p', 's', 'd', 't', 0}, false, false)
	f.Fuzz(func(t *testing.T, data []byte, class32, big bool) {
		class := elf.ELFCLASS64
		if class32 {
			class = elf.ELFCLASS32
		}
		var bo order = binary.LittleEndian
		m := elf.EM_X86_64
		if big {
			bo, m = binary.BigEndian, elf.EM_S390
		}
		notes, err := parseNotes(nil, data, 0, 4, class, bo, newInterner(0))
		if err == nil {
			for _, n := range notes {
				if n.provider == "" || n.name == "" {
					t.Fatalf("note accepted without provider or name: %+v", n)
				}
			}
		}
		file, err := Parse(bytes.NewReader(buildELF(class, bo, m, nops16, data)))
		if err == nil {
			checkFile(t, file, 1<<20)
		}
	})
}

// FuzzFile: whole ELF files, seeded with elfseed's small files and,
// as regression inputs when not fuzzing, every USDT fixture (the Go
// binaries are too large to mutate usefully). Inputs of 15-70 KiB ran
// about 2 executions a second.
func FuzzFile(f *testing.F) {
	elfseed.Each(func(_ string, b []byte) { f.Add(b) })
	paths, _ := filepath.Glob(filepath.Join(testkit.Root(), "testdata", "bin", "*"))
	for _, p := range paths {
		if st, err := os.Stat(p); err != nil || st.Size() > 256<<10 || elfseed.Fuzzing() {
			continue
		}
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add(buildELF(elf.ELFCLASS64, binary.LittleEndian, elf.EM_X86_64, nops16, encodeNotes(elf.ELFCLASS64, binary.LittleEndian, []testNote{{location: testTextAddr, provider: "p", name: "n", args: "8@%rdi"}})))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse(bytes.NewReader(data))
		if err == nil {
			checkFile(t, file, uint64(len(data)))
		}
	})
}

// checkFile asserts the invariants of a successful parse.
func checkFile(t *testing.T, f *File, size uint64) {
	t.Helper()
	if len(f.Probes) == 0 {
		t.Fatal("success without probes")
	}
	for _, p := range f.Probes {
		if p.Provider == "" || p.Name == "" || len(p.Locations) == 0 {
			t.Fatalf("bad probe %+v", p)
		}
		for _, l := range p.Locations {
			if l.SiteErr == nil && (l.Site == SiteBad || l.Site == SiteUnchecked || l.FileOffset >= size) {
				t.Fatalf("%s: usable location with site %v at offset %#x (file %d bytes)", p.String(), l.Site, l.FileOffset, size)
			}
			if l.Args != nil && l.ArgsErr != nil {
				t.Fatalf("%s: both args and an error", p.String())
			}
		}
	}
}
