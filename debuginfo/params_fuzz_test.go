package debuginfo

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"os"
	"testing"

	"github.com/probekit/probekit/internal/safeelf"
)

// FuzzSignaturesELF: hostile ELF files through OpenSignaturesELFWith,
// the entry point uprobe.Binary.Params uses, and At at every function of
// the file's table: no panic, no unbounded allocation, errors located.
// sup, when it reads as an ELF file with DWARF, is given as the
// supplementary file (SignaturesOptions.Sup): seeded with the dwz
// fixtures' common files, their own, each other's and a file's own
// DWARF, so references between the two files may point anywhere.
func FuzzSignaturesELF(f *testing.F) {
	read := func(n string) []byte {
		b, err := os.ReadFile(paramsFixture(n))
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	for _, n := range []string{"params_O2", "params_O0", "params_v4", "params_cc", "params_stripped.debug"} {
		f.Add(read(n), []byte(nil))
	}
	for _, c := range [][2]string{
		{"params_dwz", "params_dwz.sup"}, {"params_dwz5", "params_dwz5.sup"},
		{"params_dwz", "params_dwz5.sup"}, {"params_dwz5", "params_dwz.sup"},
		{"params_dwz", "params_dwz"}, {"params_dwz.sup", "params_dwz.sup"},
	} {
		f.Add(read(c[0]), read(c[1]))
	}
	f.Fuzz(func(t *testing.T, data, supData []byte) {
		ef, err := safeelf.NewFile(bytes.NewReader(data))
		if err != nil {
			return
		}
		var opts SignaturesOptions
		if sef, err := safeelf.NewFile(bytes.NewReader(supData)); err == nil {
			opts.Sup, _ = OpenLinesELF(sef, nil)
		}
		s, err := OpenSignaturesELFWith(ef, &opts)
		if err != nil {
			return
		}
		funcs, err := ef.Functions()
		if err != nil {
			return
		}
		for i := range min(funcs.Len(), 64) {
			sig, err := s.At(funcs.Address(i))
			if err != nil {
				if _, ok := err.(*LinesError); !ok && !isNoFunction(err) {
					t.Fatalf("unlocated error %T: %v", err, err)
				}
				continue
			}
			for _, p := range sig.Params {
				if len(p.Loc.Pieces) > maxPieces {
					t.Fatalf("%d pieces", len(p.Loc.Pieces))
				}
			}
		}
	})
}

func isNoFunction(err error) bool {
	return errors.Is(err, ErrNoFunction)
}

// FuzzLocations: hostile location lists and expressions, seeded from the
// fixtures' .debug_loclists (DWARF 5) and .debug_loc (DWARF 4).
func FuzzLocations(f *testing.F) {
	for _, n := range []string{"params_O2", "params_v4"} {
		sec := elfSections(f, paramsFixture(n))
		for _, name := range []string{"loclists", "loc"} {
			if b, _ := sec(name); len(b) > 0 {
				f.Add(b, uint16(0x14), false)
				f.Add(b, uint16(0), true)
			}
		}
	}
	f.Add([]byte{0x53, 0x93, 0x08, 0x52, 0x93, 0x08}, uint16(0), false)
	f.Fuzz(func(t *testing.T, sec []byte, off uint16, v4 bool) {
		lr := &locReader{order: binary.LittleEndian, addrSize: 8, base: 0x1000, addr: sec}
		var es []locEntry
		if v4 {
			es, _ = lr.readLoc(sec, int64(off))
		} else {
			es, _ = lr.readLoclists(sec, int64(off))
			loclistx(sec, binary.LittleEndian, int64(off), uint64(off), 4)
		}
		if len(es) > maxLocEntries {
			t.Fatalf("%d entries", len(es))
		}
		fi := entryFrame(elf.EM_X86_64)
		fi.addrSize = 8
		fi.frameBase(sec)
		for _, e := range es {
			fi.decodeLoc(e.expr)
		}
		if ps := fi.decodeLoc(sec); len(ps) > maxPieces+1 {
			t.Fatalf("%d pieces", len(ps))
		}
		locList(es).entryReg()
		locAt(es, 0x1010)
	})
}
