package usdt

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"

	"github.com/probekit/probekit/internal/safeelf"
)

// The NT_STAPSDT note (sourceware.org/systemtap/wiki/UserSpaceProbeImplementation):
// owner "stapsdt", type 3; desc = location, base, semaphore (each of the
// file's address size, in its byte order), then "provider\0name\0args\0".
const (
	stapsdtOwner = "stapsdt"
	ntStapsdt    = 3
	noteHdrSize  = 12 // n_namesz, n_descsz, n_type: 4-byte words in ELF32 and ELF64
)

// Ceilings on what a file can make the parser read. Each is far above
// real files and far below what hurts a tracer.
const (
	// maxNoteBytes bounds the note data read from one file, all note
	// sections or segments together. libjvm.so, the largest real user
	// (531 notes), has about 60 KiB; 16 MiB holds ~100,000 probes.
	maxNoteBytes = 16 << 20
	// maxNoteAreas bounds how many note sections or segments are walked,
	// so a file with thousands of SHT_NOTE headers pointing at one large
	// range cannot make us re-read it: real files have fewer than ten.
	maxNoteAreas = 256
)

// rawNote is one NT_STAPSDT note as the file stores it.
type rawNote struct {
	off                       int64 // file offset of the note header, for errors
	location, base, semaphore uint64
	provider, name, args      string
}

// noteArea is a range of the file holding notes: a SHT_NOTE section, or a
// PT_NOTE segment when the file has no section headers.
type noteArea struct {
	off, size, align uint64
}

// noteAreas returns where f keeps its notes, as readelf -n looks for them:
// the SHT_NOTE sections, or the PT_NOTE segments of a file without section
// headers.
func noteAreas(f *safeelf.File) ([]noteArea, error) {
	var areas []noteArea
	if len(f.Sections) > 0 {
		for _, s := range f.Sections {
			if s.Type == elf.SHT_NOTE {
				areas = append(areas, noteArea{s.Offset, s.Size, s.Addralign})
			}
		}
	} else {
		for _, p := range f.Progs {
			if p.Type == elf.PT_NOTE {
				areas = append(areas, noteArea{p.Off, p.Filesz, p.Align})
			}
		}
	}
	if len(areas) > maxNoteAreas {
		return nil, &FormatError{Msg: fmt.Sprintf("%d note sections or segments, more than the %d allowed", len(areas), maxNoteAreas)}
	}
	return areas, nil
}

// readNotes reads every NT_STAPSDT note of f in file order.
func readNotes(f *safeelf.File) ([]rawNote, error) {
	areas, err := noteAreas(f)
	if err != nil {
		return nil, err
	}
	type loaded struct {
		area noteArea
		data []byte
	}
	var all []loaded
	budget := uint64(maxNoteBytes)
	count := 0
	for _, a := range areas {
		if a.size == 0 {
			continue
		}
		if a.size > budget {
			return nil, &FormatError{Off: int64(a.off), Msg: fmt.Sprintf("note data exceeds the %d bytes allowed", maxNoteBytes)}
		}
		data, err := f.ReadAt(a.off, a.size, budget)
		if err != nil {
			return nil, err
		}
		budget -= a.size
		// Count first so the result is allocated once, at its size.
		err = walkNotes(data, a.off, a.align, f.ByteOrder, func(int64, []byte, []byte) error {
			count++
			return nil
		})
		if err != nil {
			return nil, err
		}
		all = append(all, loaded{a, data})
	}
	notes := make([]rawNote, 0, count)
	in := newInterner(count)
	for _, l := range all {
		if notes, err = parseNotes(notes, l.data, l.area.off, l.area.align, f.Class, f.ByteOrder, in); err != nil {
			return nil, err
		}
	}
	return notes, nil
}

// parseNotes appends the NT_STAPSDT notes found in data (a note area that
// starts at file offset base) to notes. Notes of other owners and types
// are skipped.
func parseNotes(notes []rawNote, data []byte, base, align uint64, class elf.Class, bo binary.ByteOrder, in *interner) ([]rawNote, error) {
	addrSize := uint64(8)
	if class == elf.ELFCLASS32 {
		addrSize = 4
	} else if class != elf.ELFCLASS64 {
		return nil, &FormatError{Msg: fmt.Sprintf("unknown ELF class %v", class)}
	}
	err := walkNotes(data, base, align, bo, func(at int64, _, desc []byte) error {
		n, err := parseStapsdt(desc, addrSize, bo, in)
		if err != nil {
			return &FormatError{Off: at, Msg: err.Error()}
		}
		n.off = at
		notes = append(notes, n)
		return nil
	})
	return notes, err
}

// walkNotes calls fn for each stapsdt note of data (a note area at file
// offset base), with the note's file offset, owner and desc bytes.
//
// Entries are padded to 4 bytes, or to 8 in an area aligned to 8 (the
// GNU property notes), as binutils reads them.
func walkNotes(data []byte, base, align uint64, bo binary.ByteOrder, fn func(at int64, name, desc []byte) error) error {
	pad := uint64(4)
	if align == 8 {
		pad = 8
	}
	size := uint64(len(data))
	for pos := uint64(0); pos < size; {
		at := int64(base + pos)
		if size-pos < noteHdrSize {
			// Trailing padding is allowed; anything else is a cut note.
			if !allZero(data[pos:]) {
				return &FormatError{Off: at, Msg: "note header cut by the end of the note area"}
			}
			return nil
		}
		namesz := uint64(bo.Uint32(data[pos:]))
		descsz := uint64(bo.Uint32(data[pos+4:]))
		typ := bo.Uint32(data[pos+8:])
		// Padding aligns the desc and the next note relative to the
		// note's start (binutils elf_parse_notes). All sums are of values
		// below 2^34: no overflow.
		nameOff := pos + noteHdrSize
		descOff := pos + alignUp(noteHdrSize+namesz, pad)
		descEnd := descOff + descsz
		if descOff > size || descEnd > size {
			return &FormatError{Off: at, Msg: fmt.Sprintf("note (namesz %d, descsz %d) crosses the end of its area (%d bytes left)", namesz, descsz, size-pos)}
		}
		name := data[nameOff : nameOff+namesz]
		if typ == ntStapsdt && string(bytes.TrimRight(name, "\x00")) == stapsdtOwner {
			if err := fn(at, name, data[descOff:descEnd]); err != nil {
				return err
			}
		}
		pos = min(pos+alignUp(descEnd-pos, pad), size)
	}
	return nil
}

// parseStapsdt decodes a stapsdt note's desc.
func parseStapsdt(desc []byte, addrSize uint64, bo binary.ByteOrder, in *interner) (rawNote, error) {
	var n rawNote
	// Three addresses and three NUL-terminated strings, the name non-empty.
	if uint64(len(desc)) < 3*addrSize+3 {
		return n, fmt.Errorf("stapsdt note desc of %d bytes, want at least %d", len(desc), 3*addrSize+3)
	}
	addr := func(i uint64) uint64 {
		if addrSize == 4 {
			return uint64(bo.Uint32(desc[i*4:]))
		}
		return bo.Uint64(desc[i*8:])
	}
	n.location, n.base, n.semaphore = addr(0), addr(1), addr(2)
	rest := desc[3*addrSize:]
	var fields [3][]byte
	for i, what := range [...]string{"provider", "name", "argument string"} {
		end := bytes.IndexByte(rest, 0)
		if end < 0 {
			return n, fmt.Errorf("stapsdt note %s not NUL-terminated", what)
		}
		fields[i], rest = rest[:end], rest[end+1:]
	}
	if len(fields[0]) == 0 || len(fields[1]) == 0 {
		return n, fmt.Errorf("stapsdt note with an empty provider or name")
	}
	n.provider, n.name = in.string(fields[0]), in.string(fields[1])
	n.args = in.string(fields[2])
	return n, nil
}

func alignUp(v, a uint64) uint64 { return (v + a - 1) &^ (a - 1) }

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// interner shares the string of a provider, name or argument string that
// repeats across notes (libjvm.so: 531 notes, one provider, many equal
// argument strings), so a probe list costs one allocation per distinct
// string.
type interner struct{ m map[string]string }

// newInterner sizes the table for n notes, at most 1024: most strings
// repeat (libjvm.so: 531 notes, about 600 distinct strings).
func newInterner(n int) *interner { return &interner{m: make(map[string]string, min(n, 1024))} }

func (in *interner) string(b []byte) string {
	if s, ok := in.m[string(b)]; ok {
		return s
	}
	s := string(b)
	in.m[s] = s
	return s
}
