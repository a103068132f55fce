package usdt

import (
	"fmt"
	"sync"
)

// specIDs hands out slots of the __bpf_usdt_specs array, one per distinct
// spec (its encoded bytes): attaches whose locations have identical specs
// share a slot, whatever the process or the attach, and a slot goes back
// to a free list when its last holder releases it. Sharing keeps the slots
// an attach needs at the number of distinct specs: a tracer that attaches
// the same file in thousands of processes (trace -f) uses the slots of one
// attach, and a process that maps nothing the specs name takes none. The
// free list keeps attach/detach cycles from exhausting the map (the leak
// parca-dev/opentelemetry-ebpf-profiler#330 hit).
type specIDs struct {
	mu     sync.Mutex
	max    uint32   // the map's max_entries
	next   uint32   // first never-used slot
	free   []uint32 // released slots, reused first
	bySpec map[string]*sharedSpec
	byID   map[uint32]string
}

// sharedSpec is a slot and the number of holders of its spec.
type sharedSpec struct {
	id   uint32
	refs int
}

func newSpecIDs(max uint32) *specIDs {
	return &specIDs{max: max, bySpec: map[string]*sharedSpec{}, byID: map[uint32]string{}}
}

// acquire returns a slot holding each of specs, taking a reference on
// it. A spec no slot holds yet gets a free slot, which write fills before
// acquire returns, under the lock: a concurrent attach of the same spec
// never sees the slot before its bytes are there. On error no reference
// is taken.
func (s *specIDs) acquire(specs [][]byte, write func(id uint32, spec []byte) error) ([]uint32, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]uint32, 0, len(specs))
	fail := func(err error) ([]uint32, error) {
		s.releaseLocked(ids)
		return nil, err
	}
	for _, b := range specs {
		if e, ok := s.bySpec[string(b)]; ok {
			e.refs++
			ids = append(ids, e.id)
			continue
		}
		var id uint32
		switch {
		case len(s.free) > 0:
			id = s.free[len(s.free)-1]
			s.free = s.free[:len(s.free)-1]
		case s.next < s.max:
			id = s.next
			s.next++
		default:
			return fail(fmt.Errorf("%w: all %d slots hold other specs (raise BPF_USDT_MAX_SPEC_CNT in the BPF program, or set the MaxEntries of %s in the CollectionSpec before loading it)",
				ErrSpecsFull, s.max, specsMapName))
		}
		if err := write(id, b); err != nil {
			s.free = append(s.free, id)
			return fail(err)
		}
		s.bySpec[string(b)] = &sharedSpec{id: id, refs: 1}
		s.byID[id] = string(b)
		ids = append(ids, id)
	}
	return ids, nil
}

// release drops one reference on each of ids.
func (s *specIDs) release(ids []uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.releaseLocked(ids)
}

func (s *specIDs) releaseLocked(ids []uint32) {
	for _, id := range ids {
		k, ok := s.byID[id]
		if !ok {
			continue
		}
		e := s.bySpec[k]
		if e.refs--; e.refs > 0 {
			continue
		}
		delete(s.bySpec, k)
		delete(s.byID, id)
		s.free = append(s.free, id)
	}
}

// inUse is the number of slots held.
func (s *specIDs) inUse() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byID)
}
