package usdt

import (
	"github.com/probekit/probekit/argspec"
)

// Probe is one USDT probe: every note of a file with the same provider and
// name. A probe has one location per call site (inlined or repeated
// STAP_PROBE uses), each with its own address, semaphore and argument
// string; never assume one.
type Probe struct {
	Provider string
	Name     string
	// Locations are in note order.
	Locations []Location
}

// String returns "provider:name".
func (p *Probe) String() string { return p.Provider + ":" + p.Name }

// Location is one call site of a probe.
type Location struct {
	// Address is the link-time virtual address of the probe's NOP, as the
	// note records it plus the prelink delta (see doc.go).
	Address uint64
	// FileOffset is where the NOP lies in the file: the offset a uprobe
	// takes. Valid only when SiteErr is nil.
	FileOffset uint64
	// Base is the note's record of the .stapsdt.base address, as stored.
	Base uint64
	// Semaphore is the link-time address of the probe's 2-byte enable
	// counter (prelink delta applied), 0 when the probe has none.
	Semaphore uint64
	// SemaphoreOffset is the semaphore's file offset: the ref_ctr_offset
	// the kernel takes. 0 when there is no semaphore.
	SemaphoreOffset uint64
	// ArgsSpec is the note's argument string, as written
	// ("-4@%edi 8@-8(%rbp)").
	ArgsSpec string
	// Args are ArgsSpec decoded for the file's machine; nil when there are
	// no arguments or ArgsErr is set. Locations with the same ArgsSpec
	// share one slice: treat it as read-only.
	Args []argspec.Arg
	// ArgsErr is why ArgsSpec did not decode. The location stays listed;
	// attaching a program that reads its arguments is the caller's call.
	ArgsErr error
	// Site is the instruction found at FileOffset.
	Site SiteKind
	// SiteLength is how many bytes the NOP at FileOffset takes (both
	// instructions for SiteNopNop5 and SiteNopNop10); 0 when Site is
	// not a NOP.
	SiteLength int
	// SiteErr, when set, is a *SiteError (wrapping ErrBadSite): the
	// location must not be attached. Site says whether its bytes are no
	// NOP (SiteBad) or a NOP the kernel places no uprobe on (x86 with a
	// segment prefix).
	SiteErr error
}
