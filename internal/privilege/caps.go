package privilege

import (
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// Cap is a Linux capability, by its number (include/uapi/linux/capability.h).
type Cap uint

// The capabilities probekit's work may need.
const (
	CapDACReadSearch Cap = 2  // CAP_DAC_READ_SEARCH
	CapSetgid        Cap = 6  // CAP_SETGID
	CapSetuid        Cap = 7  // CAP_SETUID
	CapSetpcap       Cap = 8  // CAP_SETPCAP
	CapNetAdmin      Cap = 12 // CAP_NET_ADMIN
	CapSysPtrace     Cap = 19 // CAP_SYS_PTRACE
	CapSysAdmin      Cap = 21 // CAP_SYS_ADMIN
	CapSysResource   Cap = 24 // CAP_SYS_RESOURCE
	CapPerfmon       Cap = 38 // CAP_PERFMON (Linux 5.8)
	CapBPF           Cap = 39 // CAP_BPF (Linux 5.8)
)

// capNames are the kernel's names of the capabilities probekit names,
// without the CAP_ prefix.
var capNames = map[Cap]string{
	CapDACReadSearch: "DAC_READ_SEARCH",
	CapSetgid:        "SETGID",
	CapSetuid:        "SETUID",
	CapSetpcap:       "SETPCAP",
	CapNetAdmin:      "NET_ADMIN",
	CapSysPtrace:     "SYS_PTRACE",
	CapSysAdmin:      "SYS_ADMIN",
	CapSysResource:   "SYS_RESOURCE",
	CapPerfmon:       "PERFMON",
	CapBPF:           "BPF",
}

// bare is c's name without CAP_: Kubernetes' spelling (BPF, SYS_PTRACE).
func (c Cap) bare() string {
	if n, ok := capNames[c]; ok {
		return n
	}
	return fmt.Sprintf("%d", uint(c))
}

// String is c's name as the kernel and systemd spell it: CAP_BPF.
func (c Cap) String() string { return "CAP_" + c.bare() }

// Set is a set of capabilities, bit N for capability N.
type Set uint64

// SetOf is the set of caps.
func SetOf(caps ...Cap) Set {
	var s Set
	for _, c := range caps {
		s |= 1 << c
	}
	return s
}

// Has reports whether s holds c.
func (s Set) Has(c Cap) bool { return c < 64 && s&(1<<c) != 0 }

// Caps are s's capabilities, in increasing number.
func (s Set) Caps() []Cap {
	var out []Cap
	for c := Cap(0); c < 64; c++ {
		if s.Has(c) {
			out = append(out, c)
		}
	}
	return out
}

// String lists s's capabilities (CAP_BPF, CAP_PERFMON), or "none".
func (s Set) String() string {
	if s == 0 {
		return "none"
	}
	var names []string
	for _, c := range s.Caps() {
		names = append(names, c.String())
	}
	return strings.Join(names, ", ")
}

// capabilities are the sets of the calling thread (capget(2)). Go's
// runtime keeps every thread of a process on the same sets unless a
// program changes one thread's alone (probekit does not).
type capabilities struct {
	Effective, Permitted, Inheritable Set
}

// readCapabilities is capget(2) of the calling thread, the 64-bit
// version 3 interface (Linux 2.6.26).
func readCapabilities() (capabilities, error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return capabilities{}, fmt.Errorf("capget: %w", err)
	}
	join := func(lo, hi uint32) Set { return Set(lo) | Set(hi)<<32 }
	return capabilities{
		Effective:   join(data[0].Effective, data[1].Effective),
		Permitted:   join(data[0].Permitted, data[1].Permitted),
		Inheritable: join(data[0].Inheritable, data[1].Inheritable),
	}, nil
}

// Effective is the process's effective capability set: what the kernel
// checks.
func Effective() (Set, error) {
	c, err := readCapabilities()
	return c.Effective, err
}
