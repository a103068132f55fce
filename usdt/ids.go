package usdt

import (
	"fmt"
	"sync"
)

// specIDs hands out slots of the __bpf_usdt_specs array. Slots come back
// on detach through a free list, so attach/detach cycles never exhaust
// the map (the leak parca-dev/opentelemetry-ebpf-profiler#330 hit).
type specIDs struct {
	mu   sync.Mutex
	max  uint32   // the map's max_entries
	next uint32   // first never-used slot
	free []uint32 // released slots, reused first
}

func newSpecIDs(max uint32) *specIDs { return &specIDs{max: max} }

// alloc returns n slots, or none and ErrSpecsFull.
func (s *specIDs) alloc(n int) ([]uint32, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if avail := len(s.free) + int(s.max-s.next); n > avail {
		return nil, fmt.Errorf("%w: %d spec ids needed, %d of %d free (raise BPF_USDT_MAX_SPEC_CNT in the BPF program)",
			ErrSpecsFull, n, avail, s.max)
	}
	ids := make([]uint32, 0, n)
	for len(ids) < n && len(s.free) > 0 {
		last := len(s.free) - 1
		ids = append(ids, s.free[last])
		s.free = s.free[:last]
	}
	for len(ids) < n {
		ids = append(ids, s.next)
		s.next++
	}
	return ids, nil
}

// release returns slots to the free list.
func (s *specIDs) release(ids []uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.free = append(s.free, ids...)
}

// inUse is the number of slots handed out and not released.
func (s *specIDs) inUse() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return int(s.next) - len(s.free)
}
