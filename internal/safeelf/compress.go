package safeelf

import (
	"bufio"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/klauspost/compress/zlib"
	"github.com/klauspost/compress/zstd"
)

// Compressed sections. Go's debug/elf decompresses them too, but it is not
// hardened (its doc says so) and trusts ch_size for the allocation; this
// reader checks the header's size against the caller's ceiling and
// against what the stream actually yields, and grows its buffer with the
// bytes decompressed, never with a header field.
const (
	// chdr32Size and chdr64Size: Elf32_Chdr {ch_type, ch_size,
	// ch_addralign} and Elf64_Chdr {ch_type, ch_reserved, ch_size,
	// ch_addralign} (gABI "Compressed Sections").
	chdr32Size = 12
	chdr64Size = 24
	// zdebugHeader is the legacy GNU form of a .zdebug_* section: "ZLIB"
	// and the uncompressed size, 8 bytes big-endian, then a zlib stream
	// (binutils objcopy --compress-debug-sections=zlib-gnu).
	zdebugHeader = 12
	// growChunk is how much the output buffer grows beyond what the
	// stream has produced: a header claiming 4 GiB costs no more than
	// the bytes the stream delivers plus this.
	growChunk = 1 << 20
	// startRatio times the stream is the most the output buffer starts
	// at, whatever the header claims.
	startRatio = 8
	// InflateFloor and InflateRatio bound what one File decompresses
	// in all, over every SectionData call: InflateRatio times the
	// file's size, or InflateFloor if more (InflateFloor for a reader
	// of unknown size). DWARF compresses 2 to 8 times (libc6-dbg's
	// 4.1 MB debug file holds 8.6 MB); ten sections of a small file
	// each claiming 1 GiB (a stream of zeros compresses 1000 times)
	// are refused after the first 256 MiB, not allocated.
	InflateFloor = 256 << 20
	InflateRatio = 64
)

// ErrInflateBudget indicates that decompressing a section would take the
// File past its ceiling (InflateFloor, InflateRatio).
var ErrInflateBudget = errors.New("compressed sections decompress to more than the file's ceiling")

// inflateBudget is how many bytes f may decompress in all.
func (f *File) inflateBudget() uint64 {
	if f.size < 0 {
		return InflateFloor
	}
	return max(InflateFloor, uint64(f.size)*InflateRatio)
}

// chargeInflate reserves n decompressed bytes of f's budget; false when
// it would be exceeded (nothing is reserved then).
func (f *File) chargeInflate(n uint64) bool {
	budget := f.inflateBudget()
	for {
		used := f.inflated.Load()
		if n > budget || used > budget-n {
			return false
		}
		if f.inflated.CompareAndSwap(used, used+n) {
			return true
		}
	}
}

// Inflated is how many bytes of compressed sections f has decompressed
// (reserved by their headers' sizes; failed ones given back).
func (f *File) Inflated() uint64 { return f.inflated.Load() }

// ErrCompressed indicates a section's compressed form is not one this reader
// decodes (an unknown ch_type).
var ErrCompressed = errors.New("unsupported section compression")

// SectionData returns the contents of s, decompressed when it is
// compressed: SHF_COMPRESSED with zlib (ELFCOMPRESS_ZLIB) or zstd
// (ELFCOMPRESS_ZSTD), or a legacy .zdebug_* section. Neither its size on
// disk nor its uncompressed size may exceed limit. A SHT_NOBITS section
// (what a debug file keeps of code and data) has no contents: an empty
// slice. A corrupt stream or a size that disagrees with the header is a
// *FormatError at the section's offset.
func (f *File) SectionData(s *Section, limit uint64) (data []byte, err error) {
	if s.Type == elf.SHT_NOBITS {
		return []byte{}, nil
	}
	var hsize uint64
	switch {
	case s.Flags&elf.SHF_COMPRESSED != 0:
		if s.Flags&elf.SHF_ALLOC != 0 {
			// gABI: SHF_COMPRESSED "cannot be applied to sections
			// that also have the SHF_ALLOC flag set".
			return nil, errorf(s.HeaderOff, "%s: SHF_COMPRESSED on an SHF_ALLOC section", s.Name)
		}
		hsize = chdr64Size
		if f.Class == elf.ELFCLASS32 {
			hsize = chdr32Size
		}
	case strings.HasPrefix(s.Name, ".zdebug"):
		hsize = zdebugHeader
	default:
		return f.ReadAt(s.Offset, s.Size, limit)
	}
	// A compressed section: its header is read, and its stream as it
	// is decompressed (the compressed bytes are not copied whole:
	// libc6-dbg's are 3.7 MiB).
	if s.Size > limit {
		return nil, errorf(s.Offset, "%d bytes requested, more than the %d allowed", s.Size, limit)
	}
	if end := s.Offset + s.Size; end < s.Offset || f.size >= 0 && end > uint64(f.size) {
		return nil, errorf(s.Offset, "%d bytes at offset %#x lie beyond the end of the file", s.Size, s.Offset)
	}
	raw, err := f.ReadAt(s.Offset, min(hsize, s.Size), limit)
	if err != nil {
		return nil, err
	}
	stream := func() io.Reader {
		return bufio.NewReaderSize(io.NewSectionReader(f.r, int64(s.Offset+hsize), int64(s.Size-hsize)), streamBuffer)
	}
	if s.Flags&elf.SHF_COMPRESSED != 0 {
		if uint64(len(raw)) < hsize {
			return nil, errorf(s.Offset, "%s: %d bytes, too short for a compression header", s.Name, len(raw))
		}
		var typ elf.CompressionType
		var size uint64
		if f.Class == elf.ELFCLASS32 {
			typ, size = elf.CompressionType(f.ByteOrder.Uint32(raw)), uint64(f.ByteOrder.Uint32(raw[4:]))
		} else {
			typ, size = elf.CompressionType(f.ByteOrder.Uint32(raw)), f.ByteOrder.Uint64(raw[8:])
		}
		return f.inflate(s, typ, stream(), s.Size-hsize, s.Offset+hsize, size, limit)
	}
	if len(raw) < 4 || string(raw[:4]) != "ZLIB" {
		return f.ReadAt(s.Offset, s.Size, limit) // a .zdebug name, plain contents
	}
	if len(raw) < zdebugHeader {
		return nil, errorf(s.Offset, "%s: %d bytes, too short for a ZLIB header", s.Name, len(raw))
	}
	size := binary.BigEndian.Uint64(raw[4:])
	return f.inflate(s, elf.COMPRESS_ZLIB, stream(), s.Size-hsize, s.Offset+zdebugHeader, size, limit)
}

// inflate is inflate charged against f's budget (chargeInflate) by the
// header's size, given back when the section does not decompress.
func (f *File) inflate(s *Section, typ elf.CompressionType, stream io.Reader, streamLen, off, size, limit uint64) ([]byte, error) {
	if size > limit || size > 1<<62 {
		return nil, errorf(off, "%s: uncompressed size %d exceeds the %d-byte limit", s.Name, size, limit)
	}
	if !f.chargeInflate(size) {
		return nil, fmt.Errorf("%w: %w (%d bytes decompressed already, at most %d for a file of %d bytes)",
			errorf(off, "%s: uncompressed size %d", s.Name, size), ErrInflateBudget, f.inflated.Load(), f.inflateBudget(), f.size)
	}
	b, err := inflate(s, typ, stream, streamLen, off, size, limit)
	if err != nil {
		f.inflated.Add(-size)
	}
	return b, err
}

// streamBuffer is the read size of a compressed stream.
const streamBuffer = 64 << 10

// DebugSection returns the named DWARF section decompressed (see
// SectionData), looking for ".debug_NAME" and then the legacy
// ".zdebug_NAME" when name starts with ".debug_". It is nil, with no
// error, when f has neither.
func (f *File) DebugSection(name string, limit uint64) ([]byte, error) {
	s := f.Section(name)
	if s == nil && strings.HasPrefix(name, ".debug_") {
		s = f.Section(".z" + name[1:])
	}
	if s == nil {
		return nil, nil
	}
	return f.SectionData(s, limit)
}

// inflate decompresses stream (of streamLen bytes), which must yield
// exactly size bytes.
func inflate(s *Section, typ elf.CompressionType, stream io.Reader, streamLen, off, size, limit uint64) (_ []byte, err error) {
	if size > limit || size > 1<<62 {
		return nil, errorf(off, "%s: uncompressed size %d exceeds the %d-byte limit", s.Name, size, limit)
	}
	var r io.Reader
	switch typ {
	case elf.COMPRESS_ZLIB:
		zr, err := zlib.NewReader(stream)
		if err != nil {
			return nil, errorf(off, "%s: zlib: %v", s.Name, err)
		}
		defer zr.Close()
		r = zr
	case elf.COMPRESS_ZSTD:
		// One goroutine, and the decoder's own memory capped: a frame
		// header's window size is a field of the file too.
		zr, err := zstd.NewReader(stream, zstd.WithDecoderConcurrency(1),
			zstd.WithDecoderMaxMemory(max(limit, 1)), zstd.WithDecoderMaxWindow(min(max(limit, 1<<10), zstd.MaxWindowSize)))
		if err != nil {
			return nil, errorf(off, "%s: zstd: %v", s.Name, err)
		}
		defer zr.Close()
		r = zr
	default:
		return nil, &FormatError{Off: int64(off), Msg: fmt.Sprintf("%s: compression type %d: %v", s.Name, typ, ErrCompressed)}
	}
	// The buffer starts at the header's size, capped at a few times the
	// stream (DWARF compresses 2 to 4 times: libc6-dbg's sections 2.6
	// times), and grows with what the stream yields past that. Reading
	// into the buffer directly (no bytes.Buffer) costs no clearing of
	// memory the stream then overwrites; reading one byte past size
	// sees a stream that is longer than its header says.
	buf := make([]byte, 0, min(size+1, streamLen*startRatio+growChunk))
	for {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, int(min(uint64(len(buf)), size+1-uint64(len(buf)), 64*growChunk)))
		}
		n, err := r.Read(buf[len(buf):min(uint64(cap(buf)), size+1)])
		buf = buf[:len(buf)+n]
		if uint64(len(buf)) > size {
			return nil, errorf(off, "%s: %v stream holds more than the %d bytes its header says", s.Name, typ, size)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, errorf(off, "%s: %v stream: %v after %d bytes", s.Name, typ, err, len(buf))
		}
	}
	if uint64(len(buf)) != size {
		return nil, errorf(off, "%s: %v stream holds %d bytes, its header says %d", s.Name, typ, len(buf), size)
	}
	return buf, nil
}
