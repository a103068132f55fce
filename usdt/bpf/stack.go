package bpf

import (
	"encoding/binary"
	"fmt"
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
// and sends both; DecodeStack turns them into a Stack.
type Stack []uint64

// DecodeStack reads n frames (probekit_user_stack's result) from raw,
// the frames array as the program wrote it (host byte order). A negative
// n is the error bpf_get_stack returned.
func DecodeStack(raw []byte, n int64) (Stack, error) {
	switch {
	case n < 0:
		return nil, fmt.Errorf("bpf_get_stack failed: errno %d", -n)
	case n > MaxStackDepth || int(n)*8 > len(raw):
		return nil, fmt.Errorf("stack of %d frames in %d bytes, at most %d frames", n, len(raw), MaxStackDepth)
	}
	s := make(Stack, n)
	for i := range s {
		s[i] = binary.NativeEndian.Uint64(raw[8*i:])
	}
	return s, nil
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
