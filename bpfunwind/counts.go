package bpfunwind

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/cilium/ebpf"

	"github.com/probekit/probekit/usdt/bpf"
)

// MaxFrames is the deepest walk of unwind.bpf.h's default
// PROBEKIT_CFI_MAX_FRAMES (bpf.MaxStackDepth, as the frame-pointer
// stacks).
const MaxFrames = 127

// StackRecordSize is the size of unwind.bpf.h's struct
// probekit_cfi_stack with the default PROBEKIT_CFI_MAX_FRAMES: n and
// stop, the frames, then the walk's state (pc, sp, bp, pid, at_entry,
// exact, fp_frames).
const StackRecordSize = 8 + 8*MaxFrames + 3*8 + 4*4

// Stop says why a BPF walk ended (PROBEKIT_CFI_STOP_*).
type Stop uint32

const (
	StopOutermost   Stop = 1 // an undefined or zero return address
	StopRead        Stop = 2 // a read of the stack failed
	StopUnsupported Stop = 3 // a row the walk does not compute
	StopNoProgress  Stop = 4 // the stack pointer did not grow
	StopDepth       Stop = 5 // PROBEKIT_CFI_MAX_FRAMES frames
)

var stopNames = [...]string{"", "outermost frame", "unreadable stack", "unsupported rule", "stack pointer did not grow", "depth limit"}

func (s Stop) String() string {
	if s > 0 && int(s) < len(stopNames) {
		return stopNames[s]
	}
	return fmt.Sprintf("Stop(%d)", uint32(s))
}

// DecodeStack reads a struct probekit_cfi_stack (host byte order): the
// frames, innermost first, and why the walk ended.
func DecodeStack(raw []byte) (bpf.Stack, Stop, error) {
	if len(raw) < 8 {
		return nil, 0, fmt.Errorf("bpfunwind: stack record of %d bytes", len(raw))
	}
	n, stop := binary.NativeEndian.Uint32(raw), Stop(binary.NativeEndian.Uint32(raw[4:]))
	if uint64(n) > uint64(len(raw)-8)/8 {
		return nil, stop, fmt.Errorf("bpfunwind: stack of %d frames in a record of %d bytes", n, len(raw))
	}
	s := make(bpf.Stack, n)
	for i := range s {
		s[i] = binary.NativeEndian.Uint64(raw[8+8*i:])
	}
	return s, stop, nil
}

// Counted is one distinct stack counted by unwind.bpf.h's
// probekit_cfi_count_user_stack, and why its walk ended.
type Counted struct {
	bpf.CountedStack
	Stop Stop
}

// ReadCounts reads the maps of PROBEKIT_CFI_COUNT_MAPS: each (pid,
// stack id) of counts with its stack from stacks, most frequent first.
// A stack id not in stacks (a reader racing a delete) is skipped.
func ReadCounts(stacks, counts *ebpf.Map) ([]Counted, error) {
	var (
		key struct {
			PID uint32
			_   uint32
			ID  uint64
		}
		val struct{ Count, Sum uint64 }
		out []Counted
	)
	raw := make([]byte, stacks.ValueSize())
	it := counts.Iterate()
	for it.Next(&key, &val) {
		if err := stacks.Lookup(key.ID, raw); err != nil {
			if errors.Is(err, ebpf.ErrKeyNotExist) {
				continue
			}
			return nil, fmt.Errorf("bpfunwind: stack %#x: %w", key.ID, err)
		}
		s, stop, err := DecodeStack(raw)
		if err != nil {
			return nil, err
		}
		out = append(out, Counted{CountedStack: bpf.CountedStack{PID: key.PID, Stack: s, Count: val.Count, Sum: val.Sum}, Stop: stop})
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("bpfunwind: reading counts: %w", err)
	}
	slices.SortStableFunc(out, func(a, b Counted) int { return cmp.Compare(b.Count, a.Count) })
	return out, nil
}
