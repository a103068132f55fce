package safeelf

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
)

// Note types and ceilings of the build-ID and debuglink readers.
const (
	// ntGNUBuildID is NT_GNU_BUILD_ID (elf.h), a note of owner "GNU";
	// debug/elf names no constant for it.
	ntGNUBuildID = 3
	// maxNoteSection bounds one note section or segment read for a
	// build ID: .note.gnu.build-id is 36 bytes for a SHA-1 ID, and the
	// largest note sections seen (libjvm.so's .note.stapsdt) are ~60 KiB.
	maxNoteSection = 1 << 20
	// maxBuildID bounds the ID itself: SHA-1 gives 20 bytes, --build-id=
	// 0xHEX any length; 64 bytes hold a SHA-512.
	maxBuildID = 64
	// maxDebugLink bounds .gnu_debuglink: a base name (NAME_MAX is 255),
	// padding and the CRC.
	maxDebugLink = 4096
)

// BuildID returns the GNU build ID of f (the descriptor of its
// NT_GNU_BUILD_ID note), read from its SHT_NOTE sections, or from its
// PT_NOTE segments when it has no section headers. It is nil, with no
// error, when the file has none.
func (f *File) BuildID() ([]byte, error) {
	var ranges [][3]uint64 // offset, size, alignment
	if len(f.Sections) > 0 {
		for _, s := range f.Sections {
			if s.Type == elf.SHT_NOTE {
				ranges = append(ranges, [3]uint64{s.Offset, s.Size, s.Addralign})
			}
		}
	} else {
		for _, p := range f.Progs {
			if p.Type == elf.PT_NOTE {
				ranges = append(ranges, [3]uint64{p.Off, p.Filesz, p.Align})
			}
		}
	}
	for _, r := range ranges {
		if r[1] > maxNoteSection {
			continue // not a build-ID note section; nothing to read there
		}
		data, err := f.ReadAt(r[0], r[1], maxNoteSection)
		if err != nil {
			return nil, err
		}
		id, err := findNote(data, r[0], f.ByteOrder, r[2], "GNU", ntGNUBuildID)
		if err != nil || id != nil {
			if len(id) > maxBuildID {
				return nil, errorf(r[0], "build ID of %d bytes, more than the %d allowed", len(id), maxBuildID)
			}
			return id, err
		}
	}
	return nil, nil
}

// findNote returns the descriptor of the first note of owner and type typ
// in data, nil when there is none. Entries are namesz, descsz, type, then
// the name and the descriptor, each padded to the alignment: 4, or 8 for
// notes in 8-aligned sections such as .note.gnu.property (gABI "Note
// Section"; the x86-64 psABI's program property notes).
func findNote(data []byte, base uint64, bo binary.ByteOrder, align uint64, owner string, typ uint32) ([]byte, error) {
	if align != 8 {
		align = 4
	}
	pad := func(n uint64) uint64 { return (n + align - 1) &^ (align - 1) }
	for off := uint64(0); off < uint64(len(data)); {
		if uint64(len(data))-off < 12 {
			return nil, errorf(base+off, "truncated note header")
		}
		namesz, descsz := uint64(bo.Uint32(data[off:])), uint64(bo.Uint32(data[off+4:]))
		ntype := bo.Uint32(data[off+8:])
		nameOff := off + 12
		// Padding aligns each field's offset, not its size: in an
		// 8-aligned note the descriptor follows "GNU\0" at offset 16.
		descOff := pad(nameOff + namesz)
		end := pad(descOff + descsz)
		if namesz > uint64(len(data)) || descsz > uint64(len(data)) || descOff > uint64(len(data)) || descOff+descsz > uint64(len(data)) {
			return nil, errorf(base+off, "note of name size %d and descriptor size %d overruns its %d-byte section", namesz, descsz, len(data))
		}
		name := bytes.TrimRight(data[nameOff:nameOff+namesz], "\x00")
		if ntype == typ && string(name) == owner {
			return bytes.Clone(data[descOff : descOff+descsz]), nil
		}
		off = end
	}
	return nil, nil
}

// DebugLink returns the .gnu_debuglink of f: the debug file's name and the
// CRC-32 of its contents. The section holds the name, a NUL, padding to
// 4 bytes and the CRC in the file's byte order (gdb manual, "Separate
// Debug Files"). ok is false when f has no such section.
func (f *File) DebugLink() (name string, crc uint32, ok bool, err error) {
	s := f.Section(".gnu_debuglink")
	if s == nil || s.Type == elf.SHT_NOBITS {
		return "", 0, false, nil
	}
	data, err := f.ReadAt(s.Offset, s.Size, maxDebugLink)
	if err != nil {
		return "", 0, false, err
	}
	nul := bytes.IndexByte(data, 0)
	if nul <= 0 {
		return "", 0, false, errorf(s.Offset, ".gnu_debuglink: no NUL-terminated name")
	}
	crcOff := (uint64(nul) + 1 + 3) &^ 3
	if crcOff+4 > uint64(len(data)) {
		return "", 0, false, errorf(s.Offset, ".gnu_debuglink: %d bytes leave no room for the CRC after the %d-byte name", len(data), nul)
	}
	return string(data[:nul]), f.ByteOrder.Uint32(data[crcOff:]), true, nil
}
