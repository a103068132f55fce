package python

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/probekit/probekit/interp"
)

// FuzzLineTables runs the three line-table decoders on any bytes at any
// offset: no panic, and a line at or past the first line or 0 where
// line deltas cannot go negative.
func FuzzLineTables(f *testing.F) {
	f.Add([]byte{0x80, 0x00, 0xd8, 0x04, 0x05}, 1, uint32(2))
	f.Add([]byte{0x08, 0x04, 0x08, 0x12, 0x7f, 0x00}, 2, uint32(10))
	f.Add([]byte{0xf0, 0x80, 0x01, 0x81, 0x82, 0x83, 0x04}, 3, uint32(0))
	f.Add([]byte{0xf8, 0xff, 0x7f, 0x40}, 3, uint32(4))
	f.Fuzz(func(t *testing.T, tab []byte, first int, off uint32) {
		lineLnotab(tab, first, off)
		lineTable310(tab, first, off)
		lineLocations(tab, first, off)
	})
}

// FuzzStrHeader decodes any str header and characters.
func FuzzStrHeader(f *testing.F) {
	o, _ := tableOffsets(Version{3, 11, 0})
	hdr := make([]byte, o.CompactSize+8)
	binary.LittleEndian.PutUint64(hdr[o.StrLength:], 3)
	binary.LittleEndian.PutUint32(hdr[o.StrState:], stateCompact|stateASCII|1<<stateKindShift)
	copy(hdr[o.ASCIISize:], "abc")
	f.Add(hdr, 11)
	f.Add(hdr, 12)
	f.Fuzz(func(t *testing.T, b []byte, minor int) {
		o, ok := tableOffsets(Version{3, minor, 0})
		if !ok {
			return
		}
		off, n, kind, err := strHeader(&o, b)
		if err != nil {
			return
		}
		if n > maxStringChars || (kind != 1 && kind != 2 && kind != 4) || off != o.ASCIISize && off != o.CompactSize {
			t.Fatalf("%d characters of kind %d at %d", n, kind, off)
		}
		if off < len(b) {
			decodeChars(b[off:], n, kind)
		}
	})
}

// fakeMem is a process memory of one region at base.
type fakeMem struct {
	base uint64
	b    []byte
}

func (m *fakeMem) ReadAt(p []byte, off int64) (int, error) {
	a := uint64(off)
	if a < m.base || a-m.base >= uint64(len(m.b)) {
		return 0, errors.New("EIO")
	}
	n := copy(p, m.b[a-m.base:])
	if n < len(p) {
		return n, errors.New("EIO")
	}
	return n, nil
}

// FuzzName names frames in hostile memory: whatever the bytes, Name
// returns (a frame or an Unreadable one) without panicking, and reads
// are bounded by the ceilings.
func FuzzName(f *testing.F) {
	const base = 0x10000
	for _, minor := range []int{9, 10, 11, 12, 13} {
		f.Add(sampleCode(minor, base), minor, uint32(0x20), uint32(4))
	}
	f.Fuzz(func(t *testing.T, mem []byte, minor int, code, instr uint32) {
		o, ok := tableOffsets(Version{3, minor, 0})
		if !ok {
			return
		}
		in := &Interpreter{Version: Version{3, minor, 0}, Offsets: o, names: newNameCache()}
		in.names.mem = &fakeMem{base: base, b: mem}
		fr := in.Name(interp.Raw{Code: base + uint64(code), Instr: instr})
		if fr.Unreadable == "" && len(fr.File) > 4*maxStringChars {
			t.Fatalf("file name of %d bytes", len(fr.File))
		}
		in.Name(interp.Raw{Code: base + uint64(code), Instr: instr}) // from the cache
	})
}

// sampleCode lays out, at base+0x20, a code object of 3.minor named
// "f" in "a.py" whose line table gives line 7 at offset 6.
func sampleCode(minor int, base uint64) []byte {
	o, _ := tableOffsets(Version{3, minor, 0})
	mem := make([]byte, 0x400)
	le := binary.LittleEndian
	code := mem[0x20:]
	str := func(at int, s string) {
		le.PutUint64(mem[at+o.StrLength:], uint64(len(s)))
		le.PutUint32(mem[at+o.StrState:], stateCompact|stateASCII|1<<stateKindShift)
		copy(mem[at+o.ASCIISize:], s)
	}
	str(0x200, "f")
	str(0x280, "a.py")
	le.PutUint64(code[o.CodeName:], base+0x200)
	if o.CodeQualname >= 0 {
		le.PutUint64(code[o.CodeQualname:], base+0x200)
	}
	le.PutUint64(code[o.CodeFilename:], base+0x280)
	le.PutUint32(code[o.CodeFirstLine:], 5)
	le.PutUint64(code[o.CodeLineTable:], base+0x300)
	var tab []byte
	switch {
	case minor >= 11: // 3 code units on line 5, then 1 unit 2 lines on
		tab = []byte{0x80 | 10<<3 | 2, 0, 0, 0x80 | 12<<3 | 0, 0, 0}
	case minor == 10: // 4 bytes on line 5, 4 bytes on line 7
		tab = []byte{4, 0, 4, 2}
	default: // line 7 from byte 4
		tab = []byte{4, 2}
	}
	le.PutUint64(mem[0x300+o.BytesSize:], uint64(len(tab)))
	copy(mem[0x300+o.BytesData:], tab)
	return bytes.Clone(mem)
}

// TestNameSample names sampleCode's frame for each version, and again
// after the object changed under the same address.
func TestNameSample(t *testing.T) {
	const base = 0x10000
	for _, minor := range []int{8, 9, 10, 11, 12, 13} {
		o, _ := tableOffsets(Version{3, minor, 0})
		in := &Interpreter{Version: Version{3, minor, 0}, Offsets: o, names: newNameCache()}
		mem := &fakeMem{base: base, b: sampleCode(minor, base)}
		in.names.mem = mem
		fr := in.Name(interp.Raw{Code: base + 0x20, Instr: 6})
		if fr.Func != "f" || fr.File != "a.py" || fr.Line != 7 || fr.Unreadable != "" {
			t.Errorf("3.%d: %+v, want f a.py:7", minor, fr)
		}
		// The address reused by another code object (another first line).
		binary.LittleEndian.PutUint32(mem.b[0x20+o.CodeFirstLine:], 100)
		copy(mem.b[0x200+o.ASCIISize:], "g")
		if fr := in.Name(interp.Raw{Code: base + 0x20, Instr: 0}); fr.Func != "g" || fr.Line != 100 {
			t.Errorf("3.%d: after reuse %+v, want g at line 100", minor, fr)
		}
		if fr := in.Name(interp.Raw{Code: base + 0x1000}); fr.Unreadable == "" {
			t.Errorf("3.%d: unmapped code object named %+v", minor, fr)
		}
		if fr := in.Name(interp.Raw{Code: base + 0x20, Flags: interp.FlagBad}); fr.Unreadable == "" {
			t.Errorf("3.%d: a bad frame named %+v", minor, fr)
		}
	}
}

// BenchmarkName names a cached frame: one read of the code object's
// header, checked against the cache.
func BenchmarkName(b *testing.B) {
	const base = 0x10000
	o, _ := tableOffsets(Version{3, 11, 0})
	in := &Interpreter{Version: Version{3, 11, 0}, Offsets: o, names: newNameCache()}
	in.names.mem = &fakeMem{base: base, b: sampleCode(11, base)}
	raw := interp.Raw{Code: base + 0x20, Instr: 6}
	for b.Loop() {
		if fr := in.Name(raw); fr.Line != 7 {
			b.Fatalf("%+v", fr)
		}
	}
}
