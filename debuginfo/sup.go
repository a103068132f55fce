package debuginfo

import (
	"bytes"
	"debug/dwarf"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"path/filepath"

	"github.com/probekit/probekit/internal/safeelf"
)

// Supplementary object files. dwz -m moves the DWARF entries and strings
// that several files share (types, the abstract instances of inline
// functions, their names) into one common file; each file then refers to
// it with DW_FORM_GNU_ref_alt and DW_FORM_GNU_strp_alt, and names it in
// .gnu_debugaltlink: the file name, NUL, the common file's build ID
// (dwz(1); Debian's -dbg packages ship such files under
// /usr/lib/debug/.dwz/). DWARF 5 standardized the same (§7.3.6): a
// .debug_sup section (version 5, is_supplementary 0, the file name, the
// length and bytes of a checksum) and DW_FORM_ref_sup4/8 and
// DW_FORM_strp_sup; the supplementary file's own .debug_sup has
// is_supplementary 1 and the same checksum (dwz --dwarf-5 writes them).

// maxSupLink bounds a .gnu_debugaltlink or .debug_sup section: a path
// (PATH_MAX, 4 KiB), a checksum (a 20-byte SHA-1 build ID) and a header.
const maxSupLink = 8 << 10

// ErrNoSup indicates that the supplementary file a debug file names was
// not found (wrapped with the warnings about candidates refused).
var ErrNoSup = errors.New("supplementary debug file not found")

// SupLink is what a file says of the supplementary file its DWARF refers
// to.
type SupLink struct {
	// Name is the supplementary file's path as recorded: absolute, or
	// relative to the directory of the file that records it.
	Name string
	// ID is the identity the supplementary file must have: its build ID
	// (.gnu_debugaltlink), or the checksum of its .debug_sup (DWARF 5).
	ID []byte
	// DWARF5 is set when the link came from .debug_sup.
	DWARF5 bool
}

// ReadSupLink returns the supplementary file ef's DWARF refers to, nil
// when it refers to none. A malformed section is an error.
func ReadSupLink(ef *safeelf.File) (*SupLink, error) {
	if s := ef.Section(".gnu_debugaltlink"); s != nil {
		b, err := ef.SectionData(s, maxSupLink)
		if err != nil {
			return nil, err
		}
		nul := bytes.IndexByte(b, 0)
		if nul <= 0 || nul+1 == len(b) {
			return nil, fmt.Errorf(".gnu_debugaltlink at %#x: want a file name, NUL and a build ID", s.Offset)
		}
		return &SupLink{Name: string(b[:nul]), ID: bytes.Clone(b[nul+1:])}, nil
	}
	if ef.Section(".debug_sup") == nil {
		return nil, nil
	}
	sup, name, id, err := readDebugSup(ef)
	if err != nil {
		return nil, err
	}
	if sup {
		return nil, nil // the supplementary file itself
	}
	if name == "" {
		return nil, errors.New(".debug_sup: no supplementary file name")
	}
	return &SupLink{Name: name, ID: id, DWARF5: true}, nil
}

// readDebugSup reads ef's .debug_sup (DWARF 5 §7.3.6).
func readDebugSup(ef *safeelf.File) (isSup bool, name string, checksum []byte, err error) {
	s := ef.Section(".debug_sup")
	b, err := ef.SectionData(s, maxSupLink)
	if err != nil {
		return false, "", nil, err
	}
	bad := func(msg string) error { return fmt.Errorf(".debug_sup at %#x: %s", s.Offset, msg) }
	if len(b) < 4 {
		return false, "", nil, bad("truncated")
	}
	if v := ef.ByteOrder.Uint16(b); v != 5 {
		return false, "", nil, bad(fmt.Sprintf("version %d", v))
	}
	isSup = b[2] != 0
	nul := bytes.IndexByte(b[3:], 0)
	if nul < 0 {
		return false, "", nil, bad("unterminated file name")
	}
	name = string(b[3 : 3+nul])
	n, p, ok := uleb(b, 3+nul+1, len(b))
	if !ok || n == 0 || n > uint64(len(b)-p) {
		return false, "", nil, bad("checksum past the end of the section")
	}
	return isSup, name, bytes.Clone(b[p : p+int(n)]), nil
}

// FindSup opens the supplementary file link names for the debug file
// debug (found by Find, with the same opts): at link.Name (relative to
// debug's directory when relative), then for a build ID under each of
// Options.DebugDirs at .build-id/NN/REST.debug; inside Options.Process's
// root first, then on the host, as Find looks. A candidate whose identity
// is not link.ID is refused (a warning, ErrMismatch). The error wraps
// ErrNoSup when none is found.
func FindSup(debug *File, link *SupLink, opts *Options) (*File, error) {
	fd := &finder{obj: debug.File, path: debug.Path, id: link.ID}
	if opts != nil {
		fd.opts = *opts
	}
	if len(fd.opts.DebugDirs) == 0 {
		fd.opts.DebugDirs = []string{DefaultDebugDir}
	}
	var cands []candidate
	if bytes.IndexByte([]byte(link.Name), 0) < 0 && link.Name != "" {
		p := link.Name
		if !filepath.IsAbs(p) {
			p = filepath.Join(filepath.Dir(debug.Path), p)
		}
		cands = append(cands, candidate{path: p, source: SourceSup, sup: link})
	}
	if !link.DWARF5 && len(link.ID) > 1 {
		hexID := hex.EncodeToString(link.ID)
		for _, dir := range fd.opts.DebugDirs {
			cands = append(cands, candidate{path: filepath.Join(dir, ".build-id", hexID[:2], hexID[2:]+".debug"), source: SourceSup, sup: link})
		}
	}
	for _, inRoot := range []bool{true, false} {
		if inRoot && fd.opts.Process == nil {
			continue
		}
		for _, c := range cands {
			if f := fd.try(c, inRoot); f != nil {
				f.BuildID = link.ID
				return f, nil
			}
		}
	}
	err := fmt.Errorf("debuginfo: %s: %s: %w", debug.Path, link.Name, ErrNoSup)
	if len(fd.warns) > 0 {
		err = errors.Join(append([]error{err}, fd.warns...)...)
	}
	return nil, err
}

// checkSup verifies that ef is the supplementary file link names.
func checkSup(ef *safeelf.File, link *SupLink) error {
	if link.DWARF5 {
		if ef.Section(".debug_sup") == nil {
			return fmt.Errorf("%w: no .debug_sup", ErrMismatch)
		}
		isSup, _, sum, err := readDebugSup(ef)
		if err != nil {
			return err
		}
		if !isSup || !bytes.Equal(sum, link.ID) {
			return fmt.Errorf("%w: .debug_sup checksum %x (supplementary %v), the link records %x", ErrMismatch, sum, isSup, link.ID)
		}
	} else {
		id, err := ef.BuildID()
		if err != nil {
			return err
		}
		if id == nil {
			return fmt.Errorf("%w: no build ID, .gnu_debugaltlink records %x", ErrMismatch, link.ID)
		}
		if !bytes.Equal(id, link.ID) {
			return fmt.Errorf("%w: build ID %x, .gnu_debugaltlink records %x", ErrMismatch, id, link.ID)
		}
	}
	if !hasDWARF(ef) {
		return fmt.Errorf("%w: no DWARF", ErrMismatch)
	}
	return nil
}

// References and strings into the supplementary file, for the readers
// built on debug/dwarf (Signatures). debug/dwarf decodes the forms but
// does not follow them: DW_FORM_GNU_ref_alt is a value of class
// ClassReferenceAlt and DW_FORM_GNU_strp_alt of ClassStringAlt, both
// int64 offsets; DW_FORM_ref_sup4/8 are of ClassReference but uint32 and
// uint64 (a reference within the file is a dwarf.Offset), and
// DW_FORM_strp_sup of ClassString but uint32 or uint64 (a string within
// the file is a string). Each is an offset in the supplementary file's
// .debug_info or .debug_str. dwz moves whole type trees there, in
// DW_TAG_partial_unit entries that the files' units pull in with
// DW_TAG_imported_unit: a parameter's DW_AT_type may lead into the
// supplementary file, and the references of an entry read there lead
// within it. Readers follow references one at a time, each chain
// bounded by a depth (maxTypeDepth, maxNameDepth) and each parameter's
// types by a count of entries (maxTypeEntries), so a hostile pair of
// files whose references point at each other ends.

// dwarfFiles is the DWARF of a file and of its supplementary file (nil
// when it has none or it was not given).
type dwarfFiles struct {
	d, sup *dwarf.Data
	supStr []byte // the supplementary file's .debug_str
}

// entry is a DWARF entry and the file it was read from: the file's own
// DWARF, or its supplementary file's (sup).
type entry struct {
	*dwarf.Entry
	sup bool
}

// ref is an entry's offset in the file's .debug_info or, sup set, in
// the supplementary file's.
type ref struct {
	off dwarf.Offset
	sup bool
}

// refAttr resolves reference attribute a of e: within e's file, or into
// the supplementary file. false when e has none or it is a reference
// not followed (DW_FORM_ref_sig8, into a type unit).
func refAttr(e entry, a dwarf.Attr) (ref, bool) {
	f := e.AttrField(a)
	if f == nil {
		return ref{}, false
	}
	switch v := f.Val.(type) {
	case dwarf.Offset:
		if f.Class == dwarf.ClassReference {
			return ref{v, e.sup}, true
		}
	case int64: // DW_FORM_GNU_ref_alt
		if f.Class == dwarf.ClassReferenceAlt && v >= 0 && v <= math.MaxUint32 {
			return ref{dwarf.Offset(v), true}, true
		}
	case uint32: // DW_FORM_ref_sup4
		if f.Class == dwarf.ClassReference {
			return ref{dwarf.Offset(v), true}, true
		}
	case uint64: // DW_FORM_ref_sup8
		if f.Class == dwarf.ClassReference && v <= math.MaxUint32 {
			return ref{dwarf.Offset(v), true}, true
		}
	}
	return ref{}, false
}

// str is string attribute a of e, from the supplementary file's
// .debug_str for DW_FORM_GNU_strp_alt and DW_FORM_strp_sup; false when
// e has none or it cannot be read.
func (f *dwarfFiles) str(e entry, a dwarf.Attr) (string, bool) {
	fl := e.AttrField(a)
	if fl == nil {
		return "", false
	}
	var off uint64
	switch v := fl.Val.(type) {
	case string:
		return v, true
	case int64: // DW_FORM_GNU_strp_alt
		if fl.Class != dwarf.ClassStringAlt || v < 0 {
			return "", false
		}
		off = uint64(v)
	case uint32: // DW_FORM_strp_sup, 32-bit DWARF
		off = uint64(v)
	case uint64: // DW_FORM_strp_sup, 64-bit DWARF
		off = v
	default:
		return "", false
	}
	if fl.Class != dwarf.ClassString && fl.Class != dwarf.ClassStringAlt {
		return "", false
	}
	s := cString(f.supStr, off)
	return s, s != ""
}

// OpenSup opens the DWARF of the supplementary file that debug's DWARF
// refers to, for LinesOptions.Sup and SignaturesOptions.Sup: ef is
// debug's ELF file (debug.File read through safeelf), opts the options
// Find was given. The link is read with ReadSupLink and the file found
// with FindSup (inside Options.Process's root first, its identity
// checked), read with OpenLinesELF and closed. nil, nil when debug
// refers to no supplementary file; an error wrapping ErrNoSup when it is
// not found (names and types kept there are then unknown).
func OpenSup(debug *File, ef *safeelf.File, opts *Options) (*Lines, error) {
	link, err := ReadSupLink(ef)
	if err != nil {
		return nil, fmt.Errorf("debuginfo: %s: %w", debug.Path, err)
	}
	if link == nil {
		return nil, nil
	}
	sf, err := FindSup(debug, link, opts)
	if err != nil {
		return nil, err
	}
	defer sf.Close()
	return SupLines(sf)
}

// SupLines reads the DWARF of a supplementary file found with FindSup,
// for LinesOptions.Sup and SignaturesOptions.Sup; sf may be closed after.
func SupLines(sf *File) (*Lines, error) {
	sef, err := safeelf.NewFile(sf)
	if err != nil {
		return nil, fmt.Errorf("debuginfo: %s: %w", sf.Path, err)
	}
	l, err := OpenLinesELF(sef, nil)
	if err != nil {
		return nil, fmt.Errorf("debuginfo: %s: %w", sf.Path, err)
	}
	return l, nil
}
