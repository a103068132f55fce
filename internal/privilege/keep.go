package privilege

import (
	"fmt"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Keep reduces the process's capabilities to those it holds that works
// need on this machine, and returns them with those it dropped: for a
// long-running agent once attached (the exporter keeps what a reload
// and new processes need). CAP_SYS_ADMIN is kept only where it stands
// in for a capability the process lacks (CAP_BPF and CAP_PERFMON before
// 5.8, or a process given CAP_SYS_ADMIN alone).
//
// The effective, permitted and inheritable sets of every thread are
// reduced (capset(2) through syscall.AllThreadsSyscall, as Go's threads
// each hold their own sets, which a cgo build cannot do: build with
// CGO_ENABLED=0); the kernel then clears the dropped ones
// from the ambient set. The bounding set is left as it is: the process
// cannot raise what it dropped, and probekit execs nothing afterwards.
func Keep(works ...Work) (kept, dropped Set, err error) {
	m, err := current()
	if err != nil {
		return 0, 0, err
	}
	c, err := readCapabilities()
	if err != nil {
		return 0, 0, err
	}
	want := m.required(works)
	for _, w := range works {
		for _, r := range rules(w) {
			if r.OrAdmin && (r.applies == nil || r.applies(m)) && c.Permitted&SetOf(r.Need...) != SetOf(r.Need...) {
				want |= SetOf(CapSysAdmin)
			}
		}
	}
	kept = c.Permitted & want
	dropped = (c.Permitted | c.Effective) &^ kept
	if dropped == 0 {
		return kept, 0, nil
	}
	eff := c.Effective & kept
	inh := c.Inheritable & kept
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	data := [2]unix.CapUserData{
		{Effective: uint32(eff), Permitted: uint32(kept), Inheritable: uint32(inh)},
		{Effective: uint32(eff >> 32), Permitted: uint32(kept >> 32), Inheritable: uint32(inh >> 32)},
	}
	_, _, errno := syscall.AllThreadsSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0)
	runtime.KeepAlive(&hdr)
	runtime.KeepAlive(&data)
	if errno == unix.ENOTSUP {
		return c.Permitted, 0, fmt.Errorf("capset: a cgo build cannot change every thread's capabilities (build with CGO_ENABLED=0, as make build does): %w", errno)
	}
	if errno != 0 {
		return c.Permitted, 0, fmt.Errorf("capset: %w", errno)
	}
	return kept, dropped, nil
}
