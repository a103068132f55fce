package symbolize

import (
	"math/bits"
	"sort"

	"github.com/probekit/probekit/debuginfo"
	"github.com/probekit/probekit/internal/safeelf"
)

// indexAfter is how many lookups a table serves through safeelf's
// (*Funcs).At before its addrIndex is built: a table used a few times (one
// command, one stack) is not worth the build, a table in steady use is.
const indexAfter = 16 << 10

// addrIndex answers "which function holds this address" for a table in
// steady use. The functions' starts and ends cut the file's address range
// into intervals; within one interval the function (*Funcs).At returns is
// the same, so the index records At's answer at each cut and a lookup is a
// search among the cuts, narrowed by a bucket array to a few of them.
// Offsets are 32-bit, from the lowest function address; a file whose
// functions span 4 GiB or more gets no index.
type addrIndex struct {
	base   uint64
	cuts   []uint32 // interval starts, base-relative, ascending
	fn     []int32  // the function of each interval, -1 for none
	names  []string // by function index (shares the string tables)
	shift  uint     // bucket b covers [b<<shift, (b+1)<<shift)
	bucket []uint32 // bucket[b]: how many cuts are <= b<<shift
}

// funcBounds returns the start and end of every function of funcs (not
// sorted), where the answer of (*Funcs).At may change, and the highest
// end; ok is false when an end overflows.
func funcBounds(funcs *safeelf.Funcs) (ends []uint64, hi uint64, ok bool) {
	n := funcs.Len()
	ends = make([]uint64, 0, 2*n)
	for i := range n {
		f := funcs.Func(i)
		end := f.Address + max(f.Size, 1)
		if end < f.Address {
			return nil, 0, false
		}
		ends = append(ends, f.Address, end)
		hi = max(hi, end)
	}
	return ends, hi, true
}

// indexSymbols is what a line index holds of funcs (nil when an end
// overflows).
func indexSymbols(funcs *safeelf.Funcs) *debuginfo.IndexSymbols {
	ends, _, ok := funcBounds(funcs)
	if !ok {
		return nil
	}
	return &debuginfo.IndexSymbols{Bounds: ends, At: func(pc uint64) (string, uint64, bool) {
		i, ok := funcs.At(pc)
		if !ok {
			return "", 0, false
		}
		return funcs.Name(i), funcs.Address(i), true
	}}
}

// buildIndex builds the index of funcs, or returns nil when the span is
// too large.
func buildIndex(funcs *safeelf.Funcs) *addrIndex {
	n := funcs.Len()
	if n == 0 {
		return nil
	}
	ends, hi, ok := funcBounds(funcs)
	lo := funcs.Address(0)
	if !ok || hi-lo >= 1<<32 {
		return nil
	}
	sort.Slice(ends, func(i, j int) bool { return ends[i] < ends[j] })
	x := &addrIndex{base: lo, names: make([]string, n)}
	for i := range n {
		x.names[i] = funcs.Name(i)
	}
	for k, a := range ends {
		if k > 0 && a == ends[k-1] {
			continue
		}
		i, ok := funcs.At(a)
		if !ok {
			i = -1
		}
		// Adjacent intervals of one function merge.
		if len(x.fn) > 0 && x.fn[len(x.fn)-1] == int32(i) {
			continue
		}
		x.cuts = append(x.cuts, uint32(a-lo))
		x.fn = append(x.fn, int32(i))
	}
	// About one cut per bucket.
	span := hi - lo
	x.shift = uint(max(0, bits.Len64(span/uint64(len(x.cuts)))-1))
	nb := span>>x.shift + 2
	x.bucket = make([]uint32, nb)
	k := 0
	for b := range x.bucket {
		start := uint64(b) << x.shift
		for k < len(x.cuts) && uint64(x.cuts[k]) <= start {
			k++
		}
		x.bucket[b] = uint32(k)
	}
	return x
}

// at returns the function index holding addr, as (*Funcs).At would.
func (x *addrIndex) at(addr uint64) (int, bool) {
	off := addr - x.base
	if addr < x.base || off >= 1<<32 {
		return 0, false
	}
	b := off >> x.shift
	if b+1 >= uint64(len(x.bucket)) {
		return 0, false
	}
	// The answer is the last cut <= off: at or after bucket[b]-1, before
	// bucket[b+1].
	lo, hi := int(x.bucket[b]), int(x.bucket[b+1])
	o := uint32(off)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if x.cuts[m] <= o {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == 0 {
		return 0, false
	}
	i := x.fn[lo-1]
	return int(i), i >= 0
}
