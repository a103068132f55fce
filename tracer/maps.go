package tracer

import (
	"github.com/cilium/ebpf"

	"github.com/probekit/probekit/record"
	"github.com/probekit/probekit/usdt"
)

// The sizes of usdt.bpf.h's maps in the trace program, set before it is
// loaded (its defaults, 256 specs and 1,024 addresses, are for a program
// that attaches a few probes once).
const (
	// traceSpecSlots bounds the distinct specs: each carries the cookie
	// of one site (tracer.cookie numbers the locations) and the attacher
	// shares a spec among every process that has it, so the specs a trace
	// needs are its sites, however many processes -f follows. 8,192 (as
	// many as --count counts) cost 2.4 MiB of 304-byte slots.
	traceSpecSlots = record.MaxCounted
	// traceIPSlots bounds the runtime addresses of the IP map, which only
	// kernels without BPF cookies (before 5.15) use: there every location
	// of a position-independent file takes an entry in each process that
	// maps it at its own address (ASLR), so the entries grow with the
	// processes followed. 65,536 hold a site in each of 2,000 processes 32
	// times over, for about 4 MiB of preallocated hash entries.
	traceIPSlots = 1 << 16
)

// sizeTraceMaps sizes the USDT maps of spec (usdt.Prepare readied it):
// the IP map only where it is used.
func sizeTraceMaps(spec *ebpf.CollectionSpec) error {
	ips := uint32(0)
	var cookie bool
	if v, ok := spec.Variables[record.CookieFlagName]; ok {
		if err := v.Get(&cookie); err != nil {
			return err
		}
	}
	if !cookie {
		ips = traceIPSlots
	}
	return usdt.SetCapacity(spec, traceSpecSlots, ips)
}
