package uprobe

import (
	"errors"
	"fmt"

	"github.com/probekit/probekit/debuginfo"
	"github.com/probekit/probekit/internal/safeelf"
)

// ErrNoDWARF is returned by Params for a binary whose DWARF (its own or
// its debug file's) cannot be found.
var ErrNoDWARF = errors.New("no DWARF debug information")

// Params returns fn's signature from DWARF: its parameters by name and
// type, each with where it is at fn's entry (a register by its DWARF
// number, see debuginfo.RegisterName, or a stack slot from the CFA), and
// its results. The DWARF is the binary's own or, for a stripped binary,
// its debug file's, found as DebugFile's is (locally only: inside the
// process's root first for OpenProcess, then on the host); it is read on
// the first call and kept. The error wraps ErrNoDWARF when there is none
// and debuginfo.ErrNoFunction when the DWARF does not describe fn.
//
// Params needs the open file the first time: after Close it fails unless
// an earlier call read the DWARF.
func (b *Binary) Params(fn Function) (*debuginfo.Signature, error) {
	if b.signatures == nil {
		return nil, fmt.Errorf("uprobe: %s: %w", b.display, ErrNoDWARF)
	}
	s, err := b.signatures()
	if err != nil {
		return nil, err
	}
	sig, err := s.At(fn.Address)
	if err != nil {
		return nil, fmt.Errorf("uprobe: %s: %s: %w", b.display, fn.Name, err)
	}
	return sig, nil
}

// loadSignatures opens the DWARF of the binary: its own, or its debug
// file's.
func (b *Binary) loadSignatures() (*debuginfo.Signatures, error) {
	if b.closed.Load() || b.target == nil {
		return nil, fmt.Errorf("uprobe: %s: %w (the binary is closed)", b.display, ErrNoDWARF)
	}
	opts := &debuginfo.Options{Process: b.proc, Offline: true}
	d, err := debuginfo.Find(b.target.File, b.target.Path, opts)
	if err != nil {
		return nil, fmt.Errorf("uprobe: %s: %w: %w", b.display, ErrNoDWARF, err)
	}
	defer d.Close()
	ef, err := safeelf.NewFile(d)
	if err != nil {
		return nil, fmt.Errorf("uprobe: %s: debug file %s: %w", b.display, d.Path, err)
	}
	s, err := debuginfo.OpenSignaturesELF(ef)
	if errors.Is(err, debuginfo.ErrNoLines) {
		return nil, fmt.Errorf("uprobe: %s: %w", b.display, ErrNoDWARF)
	}
	if err != nil {
		return nil, fmt.Errorf("uprobe: %s: DWARF of %s: %w", b.display, d.Path, err)
	}
	return s, nil
}
