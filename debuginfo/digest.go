package debuginfo

import (
	"crypto/sha256"
	"debug/elf"
	"encoding/binary"
	"strings"

	"github.com/probekit/probekit/internal/safeelf"
)

// digestChunk is the size of one read while hashing sections.
const digestChunk = 64 << 10

// SectionsDigest returns the SHA-256 of what a line index of the ELF
// files fs (nil ones skipped) is built from: for each file, its class
// and machine, and the header (name, type, flags, address, size) and
// bytes of each section a line index depends on, as stored in the file
// (compressed ones compressed): every section that is not loaded
// (.debug_*, .zdebug_*, .symtab, .strtab, relocations of DWARF) and
// .dynsym and .dynstr. Two files with one build ID and the same sizes
// but other DWARF or symbols have other digests (IndexKey.Digest), so
// a line index is never used for DWARF it was not built from.
//
// It reads the sections in chunks of 64 KiB into one buffer: the memory
// used does not grow with the file.
func SectionsDigest(fs ...*safeelf.File) ([]byte, error) {
	h := sha256.New()
	le := binary.LittleEndian
	var hdr []byte
	buf := make([]byte, digestChunk)
	for _, f := range fs {
		if f == nil {
			continue
		}
		hdr = le.AppendUint32(hdr[:0], uint32(len(f.Sections)))
		hdr = le.AppendUint32(hdr, uint32(f.Class))
		hdr = le.AppendUint32(hdr, uint32(f.Machine))
		h.Write(hdr)
		for i := range f.Sections {
			s := &f.Sections[i]
			if !digested(s) {
				continue
			}
			hdr = le.AppendUint32(hdr[:0], uint32(len(s.Name)))
			hdr = append(hdr, s.Name...)
			hdr = le.AppendUint32(hdr, uint32(s.Type))
			hdr = le.AppendUint64(hdr, uint64(s.Flags))
			hdr = le.AppendUint64(hdr, s.Addr)
			hdr = le.AppendUint64(hdr, s.Size)
			h.Write(hdr)
			if s.Type == elf.SHT_NOBITS {
				continue
			}
			for off := uint64(0); off < s.Size; {
				n := min(s.Size-off, digestChunk)
				if err := f.ReadFull(buf[:n], s.Offset+off); err != nil {
					return nil, err
				}
				h.Write(buf[:n])
				off += n
			}
		}
	}
	return h.Sum(nil), nil
}

// digested reports whether a line index can depend on section s.
func digested(s *safeelf.Section) bool {
	switch {
	case s.Flags&elf.SHF_ALLOC == 0:
		return s.Type != elf.SHT_NULL
	case s.Name == ".dynsym", s.Name == ".dynstr":
		return true
	}
	return strings.HasPrefix(s.Name, ".debug_") || strings.HasPrefix(s.Name, ".zdebug_")
}
