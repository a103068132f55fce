package safeelf

import (
	"debug/elf"
	"encoding/hex"
)

// maxNoteSegment bounds one PT_NOTE segment read for the build-id:
// executables and libraries carry a few notes of tens of bytes.
const maxNoteSegment = 1 << 16

// ntGNUBuildID is NT_GNU_BUILD_ID (binutils include/elf/common.h).
const ntGNUBuildID = 3

// BuildID returns the GNU build-id (NT_GNU_BUILD_ID, type 3, owner "GNU")
// of f as lowercase hex, from its PT_NOTE segments; "" when it has none.
// Notes are (namesz, descsz, type) words, then name and descriptor each
// padded to 4 bytes (gABI "Note Section").
func (f *File) BuildID() (string, error) {
	for _, p := range f.Progs {
		if p.Type != elf.PT_NOTE || p.Filesz == 0 {
			continue
		}
		b, err := f.ReadAt(p.Off, min(p.Filesz, maxNoteSegment), maxNoteSegment)
		if err != nil {
			return "", err
		}
		for len(b) >= 12 {
			namesz, descsz, typ := uint64(f.ByteOrder.Uint32(b)), uint64(f.ByteOrder.Uint32(b[4:])), f.ByteOrder.Uint32(b[8:])
			name := (namesz + 3) &^ 3
			desc := (descsz + 3) &^ 3
			if name > uint64(len(b)-12) || desc > uint64(len(b)-12)-name {
				break
			}
			if typ == ntGNUBuildID && namesz == 4 && string(b[12:16]) == "GNU\x00" {
				return hex.EncodeToString(b[12+name : 12+name+descsz]), nil
			}
			b = b[12+name+desc:]
		}
	}
	return "", nil
}
