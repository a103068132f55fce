package bpf

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/cilium/ebpf"

	"github.com/probekit/probekit/internal/features"
	"github.com/probekit/probekit/unwind"
)

// MaxStackDepth is the most frames probekit_user_stack returns
// (PROBEKIT_STACK_MAX_DEPTH in stack.bpf.h): the kernel's default
// kernel.perf_event_max_stack.
const MaxStackDepth = 127

// Stack is a user stack as stack.bpf.h's probekit_user_stack captures it,
// innermost first: the instruction pointer where the probe hit, then a
// return address per caller (at a function's entry, with at_entry, the
// caller's is second, where the frame-pointer walk alone would skip it).
// The addresses are the process's runtime addresses.
//
// A stack.bpf.h program fills an array of MaxStackDepth 8-byte frames:
//
//	__u64 frames[PROBEKIT_STACK_MAX_DEPTH];
//	long n = probekit_user_stack(ctx, frames, sizeof(frames), at_entry);
//
// and sends both; DecodeStack turns the bytes of a record into a Stack,
// StackOf the array of a bpf2go-generated struct ([127]uint64).
//
// To name a Stack, give it as it is to symbolize.Process.Stack (or
// symbolize.Stacks.Name), which names each return address at its call
// instruction; LookupAddresses is for a symbolizer of plain addresses.
type Stack []uint64

// DecodeStack reads n frames (probekit_user_stack's result) from raw,
// the frames array as the program wrote it (host byte order). A negative
// n is the error bpf_get_stack returned.
func DecodeStack(raw []byte, n int64) (Stack, error) {
	if err := checkFrames(n, len(raw)/8); err != nil {
		return nil, err
	}
	s := make(Stack, n)
	for i := range s {
		s[i] = binary.NativeEndian.Uint64(raw[8*i:])
	}
	return s, nil
}

// StackOf is the Stack of n frames (probekit_user_stack's result) of
// frames, the array as a bpf2go struct holds it (pass frames[:]). A
// negative n is the error bpf_get_stack returned. The Stack is a copy.
func StackOf(frames []uint64, n int64) (Stack, error) {
	if err := checkFrames(n, len(frames)); err != nil {
		return nil, err
	}
	return slices.Clone(Stack(frames[:n])), nil
}

// checkFrames refuses n frames of a buffer of room frames.
func checkFrames(n int64, room int) error {
	switch {
	case n < 0:
		return fmt.Errorf("bpf_get_stack failed: errno %d", -n)
	case n > MaxStackDepth || n > int64(room):
		return fmt.Errorf("stack of %d frames in room for %d, at most %d frames", n, room, MaxStackDepth)
	}
	return nil
}

// LookupAddresses returns the addresses to symbolize s with: the
// instruction pointer, then each return address minus 1, which lies in
// the call instruction. A return address itself may be the first byte of
// the next function, when the call is the last instruction of its
// caller (a call to a function that does not return: abort, panic).
func (s Stack) LookupAddresses() []uint64 {
	out := make([]uint64, len(s))
	for i, a := range s {
		if i > 0 && a > 0 {
			a--
		}
		out[i] = a
	}
	return out
}

// StackCopySize is the data size of struct probekit_stack_copy with the
// default PROBEKIT_STACK_COPY_PAGES (4 pages of 4 KiB).
const StackCopySize = 4 * 4096

// stackCopyHeader is the size of struct probekit_stack_copy's fields
// before data: ip, sp, bp, base, size, pad.
const stackCopyHeader = 8*4 + 4 + 4

// DecodeStackCopy reads a struct probekit_stack_copy (host byte order)
// as probekit_copy_stack filled it, whatever its PROBEKIT_STACK_COPY_PAGES:
// the registers and the stack bytes from rsp on, for unwind.Sample's
// Unwind. A copy whose size or base does not match its rsp is refused.
func DecodeStackCopy(raw []byte) (unwind.Sample, error) {
	if len(raw) < stackCopyHeader {
		return unwind.Sample{}, fmt.Errorf("stack copy of %d bytes, shorter than its %d-byte header", len(raw), stackCopyHeader)
	}
	ne := binary.NativeEndian
	s := unwind.Sample{IP: ne.Uint64(raw), SP: ne.Uint64(raw[8:]), BP: ne.Uint64(raw[16:])}
	base, size := ne.Uint64(raw[24:]), uint64(ne.Uint32(raw[32:]))
	data := raw[stackCopyHeader:]
	switch {
	case size == 0:
		return s, fmt.Errorf("stack copy at rsp %#x: not even its page was readable", s.SP)
	case size > uint64(len(data)) || s.SP < base || s.SP-base >= size:
		return s, fmt.Errorf("stack copy of %d bytes at %#x in a record of %d does not hold rsp %#x", size, base, len(data), s.SP)
	}
	s.Stack = unwind.StackCopy{Addr: s.SP, Data: data[s.SP-base : size]}
	return s, nil
}

// LookupStack reads stack id from stacks, a BPF_MAP_TYPE_STACK_TRACE
// map of MaxStackDepth frames that bpf_get_stackid filled with
// BPF_F_USER_STACK, innermost first; caller, when not 0, is the return
// address of a function stopped at its entry (its caller, which the
// kernel's frame-pointer walk misses there), put in second place unless
// the walk gave it. An id not in the map is an error matching
// ebpf.ErrKeyNotExist.
func LookupStack(stacks *ebpf.Map, id int32, caller uint64) (Stack, error) {
	raw := make([]byte, 8*MaxStackDepth)
	if err := stacks.Lookup(uint32(id), raw); err != nil {
		return nil, fmt.Errorf("stack %d: %w", id, err)
	}
	var s Stack
	for i := 0; i < MaxStackDepth; i++ {
		a := binary.NativeEndian.Uint64(raw[8*i:])
		if a == 0 {
			break
		}
		s = append(s, a)
	}
	if caller != 0 && len(s) > 0 && (len(s) < 2 || s[1] != caller || !kernelAddsCaller()) {
		s = slices.Insert(s, 1, caller)
	}
	return s, nil
}

// kernelAddsCaller reports whether the kernel's walk may have put a
// function entry's caller second itself (features.EntryCaller; true
// when the probe cannot tell, so that the walk's second frame decides).
// Where it does not, a second frame equal to the caller is the walk's
// own (direct recursion), and the caller is put in front of it.
func kernelAddsCaller() bool {
	adds, err := features.Have(features.EntryCaller)
	return adds || err != nil
}

// CountedStack is one distinct user stack counted by stack.bpf.h's
// probekit_count_user_stack: the process, the stack (innermost first,
// as Stack), the hits and the sum of their values.
type CountedStack struct {
	PID   uint32
	Stack Stack
	Count uint64
	Sum   uint64
}

// ReadStackCounts reads the maps of PROBEKIT_STACK_COUNT_MAPS: each key
// of counts with its stack from stacks, the caller put back in second
// place where the key holds one (at_entry) and the kernel's walk did
// not give it. The result is sorted by count, most frequent first. A
// stack id no longer in stacks (a full map evicts nothing, but a
// reader may race a delete) is skipped.
func ReadStackCounts(stacks, counts *ebpf.Map) ([]CountedStack, error) {
	var (
		key struct {
			PID     uint32
			StackID int32
			Caller  uint64
		}
		val struct{ Count, Sum uint64 }
		out []CountedStack
	)
	it := counts.Iterate()
	for it.Next(&key, &val) {
		s, err := LookupStack(stacks, key.StackID, key.Caller)
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, CountedStack{PID: key.PID, Stack: s, Count: val.Count, Sum: val.Sum})
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("reading stack counts: %w", err)
	}
	slices.SortStableFunc(out, func(a, b CountedStack) int { return cmp.Compare(b.Count, a.Count) })
	return out, nil
}
