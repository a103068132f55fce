package usdt

import (
	"errors"
	"fmt"

	"github.com/probekit/probekit/internal/safeelf"
)

var (
	// ErrNoProbes indicates an ELF file that carries no stapsdt note:
	// it was built without sys/sdt.h probes (or with them disabled).
	ErrNoProbes = errors.New("no USDT probes (no .note.stapsdt notes)")
	// ErrNotFound indicates that no probe has the requested provider and
	// name.
	ErrNotFound = errors.New("USDT probe not found")
	// ErrBadSite indicates a location that must not be attached: its address
	// lies outside the file's executable segments, its semaphore outside
	// data, or the bytes at it are not the architecture's NOP. A uprobe
	// there would plant a breakpoint in the middle of an instruction or
	// make the kernel write a counter into code.
	ErrBadSite = errors.New("unsafe USDT site")
)

// FormatError is a corrupt ELF file or note: Off is the file offset of the
// offending structure, Msg the invariant that failed.
type FormatError = safeelf.FormatError

// SiteError says why one location of a probe must not be attached. It
// wraps ErrBadSite.
type SiteError struct {
	// Probe is "provider:name".
	Probe string
	// Address is the location's link-time address.
	Address uint64
	// Segment describes the PT_LOAD involved ("LOAD [0x1000,0x1ac5) R E"),
	// or says that no PT_LOAD contains the address.
	Segment string
	// Reason is the invariant that failed.
	Reason string
}

func (e *SiteError) Error() string {
	return fmt.Sprintf("USDT %s at %#x (%s): %s: refusing to attach there", e.Probe, e.Address, e.Segment, e.Reason)
}

func (e *SiteError) Unwrap() error { return ErrBadSite }
