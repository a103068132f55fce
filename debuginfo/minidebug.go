package debuginfo

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/ulikunitz/xz"

	"github.com/probekit/probekit/internal/safeelf"
)

// MiniDebugInfo is GDB's name for the symbols Fedora, CentOS and their
// kin keep in stripped binaries: a section .gnu_debugdata holding an
// xz-compressed ELF file whose .symtab lists the functions .dynsym
// lacks (static functions), without DWARF. GDB's manual, "MiniDebugInfo",
// describes the layout; elfutils' libdwfl reads it too.

// Bounds of a .gnu_debugdata section: Fedora 41's libc keeps 92 KB
// compressed for 2,900 symbols.
const (
	maxMiniCompressed   = 16 << 20
	maxMiniUncompressed = 64 << 20
	// maxMiniDict bounds the LZMA2 dictionary a block may ask for: the
	// decoder allocates it whole. xz's presets use at most 64 MiB (-9).
	maxMiniDict = 64 << 20
)

// ErrNoMiniDebugInfo indicates an object without a .gnu_debugdata section.
var ErrNoMiniDebugInfo = errors.New("no .gnu_debugdata section")

// MiniDebugInfo returns the ELF file in ef's .gnu_debugdata section,
// decompressed: pass it to safeelf's FunctionsWith as a debug file. The
// xz stream is checked before it is decoded (one stream, its index and
// every block header read, each block's LZMA2 dictionary and the total
// size bounded), so a hostile section costs at most the bounds above.
func MiniDebugInfo(ef *safeelf.File) (_ *safeelf.File, err error) {
	defer safeelf.Recover(&err)
	s := ef.Section(".gnu_debugdata")
	if s == nil || s.Size == 0 {
		return nil, ErrNoMiniDebugInfo
	}
	if s.Size > maxMiniCompressed {
		return nil, fmt.Errorf(".gnu_debugdata: %d bytes, more than the %d allowed", s.Size, maxMiniCompressed)
	}
	data, err := ef.ReadAt(s.Offset, s.Size, maxMiniCompressed)
	if err != nil {
		return nil, fmt.Errorf(".gnu_debugdata: %w", err)
	}
	out, err := decompressMini(data)
	if err != nil {
		return nil, err
	}
	f, err := safeelf.NewFile(bytes.NewReader(out))
	if err != nil {
		return nil, fmt.Errorf(".gnu_debugdata: embedded ELF file: %w", err)
	}
	return f, nil
}

// decompressMini checks and decodes one xz stream.
func decompressMini(data []byte) ([]byte, error) {
	size, err := checkXZ(data)
	if err != nil {
		return nil, fmt.Errorf(".gnu_debugdata: %w", err)
	}
	r, err := xz.ReaderConfig{SingleStream: true}.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf(".gnu_debugdata: xz: %w", err)
	}
	out := make([]byte, 0, size)
	buf := bytes.NewBuffer(out)
	if _, err := buf.ReadFrom(io.LimitReader(r, int64(size)+1)); err != nil {
		return nil, fmt.Errorf(".gnu_debugdata: xz: %w after %d bytes", err, buf.Len())
	}
	if uint64(buf.Len()) != size {
		return nil, fmt.Errorf(".gnu_debugdata: xz stream gives %d bytes, its index says %d", buf.Len(), size)
	}
	return buf.Bytes(), nil
}

// xzError is a malformed xz stream, located.
func xzError(off int, format string, args ...any) error {
	return fmt.Errorf("xz stream at offset %d: %s", off, fmt.Sprintf(format, args...))
}

// checkXZ reads the framing of a single xz stream (The .xz File Format
// 1.2.0: stream header and footer §2.1, blocks §3, index §4) and returns
// its uncompressed size. It refuses what the decoder would allocate
// beyond the bounds: a dictionary over maxMiniDict, a total over
// maxMiniUncompressed.
func checkXZ(data []byte) (uint64, error) {
	const hdr = 12
	if len(data) < 2*hdr || !bytes.Equal(data[:6], []byte{0xfd, '7', 'z', 'X', 'Z', 0}) {
		return 0, xzError(0, "no xz stream header")
	}
	foot := data[len(data)-hdr:]
	if foot[10] != 'Y' || foot[11] != 'Z' {
		return 0, xzError(len(data)-2, "no stream footer (one stream without padding expected)")
	}
	if !bytes.Equal(foot[8:10], data[6:8]) {
		return 0, xzError(len(data)-4, "footer's stream flags differ from the header's")
	}
	backward := (uint64(binary.LittleEndian.Uint32(foot[4:8])) + 1) * 4
	if backward > uint64(len(data)-2*hdr) {
		return 0, xzError(len(data)-8, "index of %d bytes does not fit", backward)
	}
	idxOff := len(data) - hdr - int(backward)
	idx := data[idxOff : len(data)-hdr]
	if idx[0] != 0 {
		return 0, xzError(idxOff, "index indicator %#x", idx[0])
	}
	p := 1
	n, ok := xzVarint(idx, &p)
	if !ok || n > uint64(len(idx)) {
		return 0, xzError(idxOff+p, "bad number of index records")
	}
	var total uint64
	blockOff := hdr
	for i := uint64(0); i < n; i++ {
		unpadded, ok1 := xzVarint(idx, &p)
		usize, ok2 := xzVarint(idx, &p)
		if !ok1 || !ok2 || unpadded < 5 {
			return 0, xzError(idxOff+p, "bad index record %d", i)
		}
		total += usize
		if total > maxMiniUncompressed || usize > maxMiniUncompressed {
			return 0, xzError(idxOff+p, "uncompressed size over the %d-byte bound", maxMiniUncompressed)
		}
		padded := (unpadded + 3) &^ 3
		if padded > uint64(idxOff-blockOff) {
			return 0, xzError(blockOff, "block %d of %d bytes runs into the index", i, padded)
		}
		if err := checkXZBlockHeader(data[blockOff:blockOff+int(padded)], blockOff); err != nil {
			return 0, err
		}
		blockOff += int(padded)
	}
	if blockOff != idxOff {
		return 0, xzError(blockOff, "%d bytes between the last block and the index", idxOff-blockOff)
	}
	return total, nil
}

// checkXZBlockHeader reads a block header's filter chain (§3.1) and
// refuses an LZMA2 dictionary above maxMiniDict.
func checkXZBlockHeader(b []byte, at int) error {
	size := (int(b[0]) + 1) * 4
	if b[0] == 0 || size > len(b) {
		return xzError(at, "block header of %d bytes", size)
	}
	h := b[:size]
	flags := h[1]
	if flags&0x3c != 0 {
		return xzError(at+1, "reserved block flags %#x", flags)
	}
	p := 2
	for _, present := range []bool{flags&0x40 != 0, flags&0x80 != 0} {
		if present {
			if _, ok := xzVarint(h, &p); !ok {
				return xzError(at+p, "bad block size field")
			}
		}
	}
	for f := 0; f <= int(flags&3); f++ {
		id, ok1 := xzVarint(h, &p)
		n, ok2 := xzVarint(h, &p)
		if !ok1 || !ok2 || n > uint64(len(h)-p) {
			return xzError(at+p, "bad filter flags")
		}
		if id == 0x21 { // LZMA2: one property byte, the dictionary size
			if n != 1 {
				return xzError(at+p, "LZMA2 with %d property bytes", n)
			}
			code := h[p]
			if code > 40 {
				return xzError(at+p, "LZMA2 dictionary code %d", code)
			}
			// §5.3.1: 2 or 3 times a power of two, 4 GiB - 1 at 40.
			dict := uint64(2|code&1) << (code/2 + 11)
			if code == 40 || dict > maxMiniDict {
				return xzError(at+p, "LZMA2 dictionary of %d bytes, more than the %d allowed", dict, maxMiniDict)
			}
		}
		p += int(n)
	}
	return nil
}

// xzVarint reads a multibyte integer (§1.2): 7 bits a byte, least
// significant first, at most 9 bytes.
func xzVarint(b []byte, p *int) (uint64, bool) {
	var v uint64
	for i := 0; i < 9; i++ {
		if *p >= len(b) {
			return 0, false
		}
		c := b[*p]
		*p++
		v |= uint64(c&0x7f) << (7 * i)
		if c&0x80 == 0 {
			return v, i == 0 || c != 0
		}
	}
	return 0, false
}
