package tracer

import (
	"github.com/probekit/probekit/probe"
	"github.com/probekit/probekit/record"
)

// Value returns argument a of the hit (probe.Arg(1) is the first, as
// --hist 1 and the filters count; probe.Ret() a uretprobe's return
// value), and false when the hit has no such value or it could not be
// read. The embedded Event's Args are the same values indexed from 0.
func (h *Hit) Value(a probe.ArgNum) (int64, bool) {
	i := h.index(a)
	if i < 0 || h.Errors&(1<<i) != 0 {
		return 0, false
	}
	return h.Args[i], true
}

// Str returns the string argument a points to (probe.Arg(1) is the
// first, as --str 1 counts), when Config.Strs asked for it and it could
// be read. It hides the embedded Event's Str, which counts from 0.
func (h *Hit) Str(a probe.ArgNum) ([]byte, bool) {
	i := h.index(a)
	if i < 0 || h.Errors&(1<<i) != 0 {
		return nil, false
	}
	return h.Event.Str(i)
}

// index is a's slot in h's values, -1 when h has none there.
func (h *Hit) index(a probe.ArgNum) int {
	i := a.Index()
	if a.IsRet() != (h.Kind == record.KindUretprobe) || i < 0 || i >= h.NArgs {
		return -1
	}
	return i
}
