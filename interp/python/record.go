package python

import (
	"encoding/binary"
	"fmt"

	"github.com/probekit/probekit/interp"
)

// StackRecordSize is sizeof(struct probekit_interp_stack): n, stop and
// MaxFrames frames of 16 bytes.
const StackRecordSize = 8 + MaxFrames*16

// DecodeStack decodes a struct probekit_interp_stack as python.bpf.h
// wrote it (in the host's byte order, little-endian on the targets it
// supports): the frames innermost first and why the walk ended.
func DecodeStack(b []byte) ([]interp.Raw, Stop, error) {
	if len(b) < StackRecordSize {
		return nil, 0, fmt.Errorf("python: stack record of %d bytes, want %d", len(b), StackRecordSize)
	}
	le := binary.LittleEndian
	n := le.Uint32(b)
	stop := Stop(le.Uint32(b[4:]))
	if n > MaxFrames {
		return nil, stop, fmt.Errorf("python: stack record of %d frames, at most %d", n, MaxFrames)
	}
	out := make([]interp.Raw, n)
	for i := range out {
		f := b[8+16*i:]
		out[i] = interp.Raw{Code: le.Uint64(f), Instr: le.Uint32(f[8:]), Flags: le.Uint32(f[12:])}
	}
	return out, stop, nil
}
