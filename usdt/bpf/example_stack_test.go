package bpf_test

import (
	"encoding/binary"
	"fmt"

	"github.com/cilium/ebpf/ringbuf"

	"github.com/probekit/probekit/symbolize"
	"github.com/probekit/probekit/usdt/bpf"
)

// A program built with stack.bpf.h sends, per hit,
//
//	struct event {
//		__u32 pid, tid;
//		__s64 nframes;
//		__u64 frames[PROBEKIT_STACK_MAX_DEPTH];
//	};
//
// filled by probekit_user_stack(ctx, e->frames, sizeof(e->frames),
// at_entry). The reader decodes each stack and names its frames in the
// process that hit the probe. (Compile-only: it needs a loaded program.)
func ExampleDecodeStack() {
	var rd *ringbuf.Reader // over the program's ring buffer
	sym := symbolize.New(nil)
	for {
		rec, err := rd.Read()
		if err != nil {
			return
		}
		raw := rec.RawSample
		pid := binary.NativeEndian.Uint32(raw)
		stack, err := bpf.DecodeStack(raw[16:], int64(binary.NativeEndian.Uint64(raw[8:])))
		if err != nil {
			continue
		}
		p, err := sym.Process(int(pid))
		if err != nil {
			continue // the process has exited
		}
		// Return addresses are looked up in their call instruction.
		frames, err := p.Symbolize(stack.LookupAddresses())
		if err != nil {
			continue
		}
		for _, f := range frames {
			fmt.Println(f)
		}
	}
}
