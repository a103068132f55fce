package safeelf

import (
	"debug/elf"
	"encoding/binary"
)

// GNU symbol versioning (LSB Core, "Symbol Versioning"): .gnu.version
// (SHT_GNU_versym) holds one 16-bit index per .dynsym entry; indexes 0
// (local) and 1 (global, the base version) carry no name; others name a
// version defined by this file (.gnu.version_d, SHT_GNU_verdef) or
// needed from another (.gnu.version_r, SHT_GNU_verneed). Bit 15 hides the
// symbol: only a reference naming the version binds to it (name@VERSION
// rather than name@@VERSION).

// maxVersionSection bounds .gnu.version_d and .gnu.version_r: glibc's
// libc.so.6, with some forty versions, has under 1 KiB of each.
const maxVersionSection = 16 << 20

// versionHidden is bit 15 of a .gnu.version entry.
const versionHidden = 0x8000

// Entry layouts (the same in ELF32 and ELF64): Elf_Verdef is 20 bytes,
// Elf_Verdaux 8, Elf_Verneed 16, Elf_Vernaux 16.
const (
	verdefSize  = 20
	verdauxSize = 8
	verneedSize = 16
	vernauxSize = 16
)

type version struct {
	name    string
	library string // the needing file's vn_file; "" for a definition
}

// versionTable is the versions of one .dynsym.
type versionTable struct {
	le     bool
	versym []byte     // 2 bytes per symbol
	byNdx  []*version // by version index, nil where none is defined
	all    []version  // backing store of byNdx
}

func (v *versionTable) index(i int) elf.VersionIndex {
	b := v.versym[2*i:]
	if v.le {
		return elf.VersionIndex(binary.LittleEndian.Uint16(b))
	}
	return elf.VersionIndex(binary.BigEndian.Uint16(b))
}

func (v *versionTable) lookup(vi elf.VersionIndex) *version {
	ndx := int(vi &^ versionHidden)
	if ndx < 2 || ndx >= len(v.byNdx) {
		return nil
	}
	return v.byNdx[ndx]
}

// readVersions reads the version sections of the dynamic symbol table t,
// nil when the file has no .gnu.version. Every index .gnu.version uses
// must be defined or needed.
func (f *File) readVersions(t *Symbols) (*versionTable, error) {
	vs := f.SectionByType(elf.SHT_GNU_VERSYM)
	if vs == nil {
		return nil, nil
	}
	need := uint64(t.n) * 2
	if vs.Size < need {
		return nil, errorf(vs.HeaderOff, "%s: %d bytes for %d symbols, want %d", vs.Name, vs.Size, t.n, need)
	}
	versym, err := f.ReadAt(vs.Offset, need, maxSymbols*2)
	if err != nil {
		return nil, err
	}
	v := &versionTable{le: t.le, versym: versym}
	type def struct {
		ndx uint16
		version
	}
	var defs []def
	// read returns the first section of type typ (nil if none), its
	// bytes and the string table it links to (usually .dynstr, already
	// read for the symbols).
	read := func(typ elf.SectionType) (sec *Section, data, str []byte, err error) {
		if sec = f.SectionByType(typ); sec == nil {
			return nil, nil, nil, nil
		}
		if data, err = f.ReadAt(sec.Offset, sec.Size, maxVersionSection); err != nil {
			return nil, nil, nil, err
		}
		if str = t.strtab; sec.Link != t.Section.Link {
			str, err = f.stringTable(sec, sec.Link)
		}
		return sec, data, str, err
	}
	u16, u32 := t.u16, t.u32

	sec, data, str, err := read(elf.SHT_GNU_VERDEF)
	if err != nil {
		return nil, err
	}
	if sec != nil {
		// vd_next moves strictly forward, so the walk ends.
		for off := uint64(0); ; {
			at := sec.Offset + off
			if off+verdefSize > uint64(len(data)) {
				return nil, errorf(at, "%s: version definition runs past the section", sec.Name)
			}
			d := data[off:]
			if ver := u16(d); ver != 1 {
				return nil, errorf(at, "%s: version definition revision %d, want 1", sec.Name, ver)
			}
			ndx, cnt, aux, next := u16(d[4:])&^versionHidden, u16(d[6:]), uint64(u32(d[12:])), uint64(u32(d[16:]))
			if cnt == 0 {
				return nil, errorf(at, "%s: version definition %d has no name", sec.Name, ndx)
			}
			// The first Elf_Verdaux names the version; the others
			// name its predecessors.
			if off+aux+verdauxSize > uint64(len(data)) {
				return nil, errorf(at, "%s: version definition %d: name entry at +%#x lies past the section", sec.Name, ndx, aux)
			}
			name := u32(data[off+aux:])
			if uint64(name) >= uint64(len(str)) {
				return nil, errorf(sec.Offset+off+aux, "%s: version name offset %#x lies past the %d-byte string table", sec.Name, name, len(str))
			}
			defs = append(defs, def{ndx, version{name: cstring0(str, name)}})
			if next == 0 {
				break
			}
			off += next
		}
	}

	if sec, data, str, err = read(elf.SHT_GNU_VERNEED); err != nil {
		return nil, err
	}
	if sec != nil {
		for off := uint64(0); ; {
			at := sec.Offset + off
			if off+verneedSize > uint64(len(data)) {
				return nil, errorf(at, "%s: version need runs past the section", sec.Name)
			}
			d := data[off:]
			if ver := u16(d); ver != 1 {
				return nil, errorf(at, "%s: version need revision %d, want 1", sec.Name, ver)
			}
			cnt, file, aux, next := u16(d[2:]), u32(d[4:]), uint64(u32(d[8:])), uint64(u32(d[12:]))
			if uint64(file) >= uint64(len(str)) {
				return nil, errorf(at, "%s: file name offset %#x lies past the %d-byte string table", sec.Name, file, len(str))
			}
			lib := cstring0(str, file)
			a := off + aux
			for k := uint16(0); k < cnt; k++ {
				if a+vernauxSize > uint64(len(data)) {
					return nil, errorf(at, "%s: version %d needed from %s lies past the section", sec.Name, k, lib)
				}
				x := data[a:]
				other, name, anext := u16(x[6:])&^versionHidden, u32(x[8:]), uint64(u32(x[12:]))
				if uint64(name) >= uint64(len(str)) {
					return nil, errorf(sec.Offset+a, "%s: version name offset %#x lies past the %d-byte string table", sec.Name, name, len(str))
				}
				defs = append(defs, def{other, version{name: cstring0(str, name), library: lib}})
				if anext == 0 {
					break
				}
				a += anext
			}
			if next == 0 {
				break
			}
			off += next
		}
	}

	maxNdx := 1
	for _, d := range defs {
		maxNdx = max(maxNdx, int(d.ndx))
	}
	v.all = make([]version, len(defs))
	v.byNdx = make([]*version, maxNdx+1)
	for i, d := range defs {
		v.all[i] = d.version
		if v.byNdx[d.ndx] == nil {
			v.byNdx[d.ndx] = &v.all[i]
		}
	}
	for i := 1; i < t.n; i++ {
		if ndx := int(v.index(i) &^ versionHidden); ndx >= 2 && (ndx >= len(v.byNdx) || v.byNdx[ndx] == nil) {
			return nil, errorf(vs.Offset+2*uint64(i), "%s: symbol %d has version index %d, which no version section defines", vs.Name, i, ndx)
		}
	}
	return v, nil
}
