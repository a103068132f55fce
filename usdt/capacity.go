package usdt

import (
	"fmt"

	"github.com/cilium/ebpf"
)

// SetCapacity sizes, in spec before it is loaded, the maps of usdt.bpf.h:
// specs is how many distinct specs __bpf_usdt_specs holds (the header's
// BPF_USDT_MAX_SPEC_CNT, 256 by default) and ips how many runtime
// addresses __bpf_usdt_ip_to_spec_id holds (BPF_USDT_MAX_IP_CNT, four
// times as many by default; used only on kernels without BPF cookies,
// where a position-independent file takes an entry per location and
// process). 0 leaves a size as it is. The specs map is an array the
// kernel allocates whole: each slot costs the spec's size (304 bytes in
// the libbpf 1.7 layout).
func SetCapacity(spec *ebpf.CollectionSpec, specs, ips uint32) error {
	ms, ok := spec.Maps[specsMapName]
	if !ok {
		return ErrNoSpecsMap
	}
	if specs != 0 {
		ms.MaxEntries = specs
	}
	if ips != 0 {
		mi, ok := spec.Maps[ipMapName]
		if !ok {
			return fmt.Errorf("no %s map", ipMapName)
		}
		mi.MaxEntries = ips
	}
	return nil
}
