package symbolize

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"slices"
	"strconv"
)

// A perf map is the text file a JIT compiler writes so that profilers can
// name its code (tools/perf/Documentation/jit-interface.txt in the Linux
// tree): /tmp/perf-PID.map, one line per function,
//
//	START SIZE NAME
//
// START and SIZE in hexadecimal (with or without 0x), NAME up to the end
// of the line and possibly with spaces. The file is only appended to;
// code memory the JIT reuses gets a new line, so of overlapping entries the
// later one wins. node --perf-basic-prof and Java's perf-map-agent write it.

// The perf map is read on the process's behalf and its names are printed:
// it is opened with procmaps.(*Process).OpenOwned, so that a process cannot
// make it name a file it may not read (a symlink, a hard link or a bind
// mount of a root-only file, another user's file).

// PerfMapErr returns why p's perf map was not read at its last look: an
// error wrapping procmaps.ErrNotOwned when the file was refused, or one of
// reading it. It is nil when the map was read, when it does not exist
// (most processes have none) and before the first address in anonymous
// executable memory made p look for it.
func (p *Process) PerfMapErr() error {
	st := p.perf.Load()
	if st == nil || st.err == nil || errors.Is(st.err, fs.ErrNotExist) {
		return nil
	}
	return st.err
}

// Ceilings of the perf map parser: the file belongs to the traced
// process, which may write anything.
const (
	// MaxPerfMapBytes is how much of a perf map is read; the rest is
	// ignored (and counted as truncated).
	MaxPerfMapBytes = 256 << 20
	// MaxPerfMapEntries bounds the entries kept.
	MaxPerfMapEntries = 4 << 20
	// MaxPerfMapName bounds a name; a longer one is cut.
	MaxPerfMapName = 4 << 10
)

// PerfMap is a parsed perf map, immutable and safe for concurrent use.
type PerfMap struct {
	entries []perfEntry // by start, then by line
	// segs is the map resolved: disjoint ranges by address, each named
	// by the entry written last of those covering it, so that a lookup
	// is one binary search whatever the entries overlap (one entry
	// spanning the address space and 100,000 others inside it cost
	// no more than 100,000 disjoint ones).
	segs []perfSeg
	// Bad counts lines that are not START SIZE NAME (or have size 0, or
	// wrap around the address space); Truncated is set when the file or
	// the entries exceeded a ceiling.
	Bad       int
	Truncated bool
	size      int64 // bytes read
}

// perfSeg is [start, end) named by entries[entry].
type perfSeg struct {
	start, end uint64
	entry      int32
}

type perfEntry struct {
	start, end uint64
	seq        int // line order: the later wins
	name       string
}

// ParsePerfMap reads a perf map from r, up to MaxPerfMapBytes. Bad lines
// are skipped and counted; only a read error fails it.
func ParsePerfMap(r io.Reader) (*PerfMap, error) {
	return parsePerfMap(r, nil, false, MaxPerfMapBytes, MaxPerfMapEntries)
}

// parsePerfMap parses r, which continues the file prev was read from
// (nil: r is the whole file): the result has prev's entries and r's, and
// prev is left as it was. With partial set, a last line without its
// newline is left for the next read (the JIT may be writing it).
func parsePerfMap(r io.Reader, prev *PerfMap, partial bool, maxBytes, maxEntries int) (*PerfMap, error) {
	m := &PerfMap{}
	if prev != nil {
		*m = *prev
		m.entries = slices.Clone(prev.entries)
	}
	budget := int64(maxBytes) - m.size
	if budget <= 0 || m.Truncated {
		m.Truncated = true
		return m, nil
	}
	data, err := io.ReadAll(io.LimitReader(r, budget+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > budget {
		data, m.Truncated, partial = data[:budget], true, true
	}
	if partial {
		// Only whole lines.
		data = data[:bytes.LastIndexByte(data, '\n')+1]
	}
	m.size += int64(len(data))
	seq := len(m.entries) + m.Bad
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		if len(line) == 0 {
			continue
		}
		if len(m.entries) == maxEntries {
			m.Truncated = true
			break
		}
		e, ok := parsePerfLine(line)
		if !ok {
			m.Bad++
			continue
		}
		e.seq = seq
		seq++
		m.entries = append(m.entries, e)
	}
	slices.SortFunc(m.entries, func(a, b perfEntry) int {
		if a.start != b.start {
			if a.start < b.start {
				return -1
			}
			return 1
		}
		return a.seq - b.seq
	})
	m.segs = resolvePerf(m.entries)
	return m, nil
}

// resolvePerf returns the disjoint ranges of entries (sorted by start),
// each named by the covering entry of the highest seq: a sweep over the
// 2n start and end addresses with a heap of the entries begun, in
// O(n log n) time and at most 2n ranges.
func resolvePerf(entries []perfEntry) []perfSeg {
	if len(entries) == 0 {
		return nil
	}
	bounds := make([]uint64, 0, 2*len(entries))
	for _, e := range entries {
		bounds = append(bounds, e.start, e.end)
	}
	slices.Sort(bounds)
	bounds = slices.Compact(bounds)
	var h perfHeap
	h.entries = entries
	var segs []perfSeg
	next := 0 // entries[next:] have not begun
	for k := 0; k+1 < len(bounds); k++ {
		b := bounds[k]
		for next < len(entries) && entries[next].start <= b {
			h.push(int32(next))
			next++
		}
		// Entries that ended are dropped as they reach the top: the top
		// is all that names the range.
		for len(h.idx) > 0 && entries[h.idx[0]].end <= b {
			h.pop()
		}
		if len(h.idx) == 0 {
			continue
		}
		top := h.idx[0]
		if n := len(segs); n > 0 && segs[n-1].entry == top && segs[n-1].end == b {
			segs[n-1].end = bounds[k+1]
			continue
		}
		segs = append(segs, perfSeg{start: b, end: bounds[k+1], entry: top})
	}
	return slices.Clip(segs)
}

// perfHeap is a max-heap of entry indexes by seq.
type perfHeap struct {
	entries []perfEntry
	idx     []int32
}

func (h *perfHeap) above(i, j int) bool { return h.entries[h.idx[i]].seq > h.entries[h.idx[j]].seq }

func (h *perfHeap) push(e int32) {
	h.idx = append(h.idx, e)
	for i := len(h.idx) - 1; i > 0; {
		p := (i - 1) / 2
		if !h.above(i, p) {
			break
		}
		h.idx[i], h.idx[p] = h.idx[p], h.idx[i]
		i = p
	}
}

func (h *perfHeap) pop() {
	n := len(h.idx) - 1
	h.idx[0] = h.idx[n]
	h.idx = h.idx[:n]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && h.above(l, m) {
			m = l
		}
		if r < n && h.above(r, m) {
			m = r
		}
		if m == i {
			return
		}
		h.idx[i], h.idx[m] = h.idx[m], h.idx[i]
		i = m
	}
}

// parsePerfLine parses "START SIZE NAME" (a trailing \r is dropped).
func parsePerfLine(line []byte) (perfEntry, bool) {
	line = bytes.TrimSuffix(line, []byte("\r"))
	start, rest, ok := hexField(line)
	if !ok {
		return perfEntry{}, false
	}
	size, rest, ok := hexField(rest)
	if !ok || size == 0 || start+size < start {
		return perfEntry{}, false
	}
	name := bytes.TrimLeft(rest, " \t")
	if len(name) == 0 {
		return perfEntry{}, false
	}
	if len(name) > MaxPerfMapName {
		name = name[:MaxPerfMapName]
	}
	return perfEntry{start: start, end: start + size, name: string(name)}, true
}

// hexField parses a hexadecimal number (0x optional) at the start of b,
// after leading blanks, and returns the rest, which must be empty or start
// with a blank.
func hexField(b []byte) (uint64, []byte, bool) {
	b = bytes.TrimLeft(b, " \t")
	if len(b) >= 2 && b[0] == '0' && (b[1] == 'x' || b[1] == 'X') {
		b = b[2:]
	}
	n := 0
	for n < len(b) && b[n] != ' ' && b[n] != '\t' {
		n++
	}
	if n == 0 || n > 16 {
		return 0, nil, false
	}
	v, err := strconv.ParseUint(string(b[:n]), 16, 64)
	if err != nil {
		return 0, nil, false
	}
	return v, b[n:], true
}

// Lookup returns the name of the entry holding addr and addr's offset in
// it; of overlapping entries, the one written last. It is one binary
// search over the resolved ranges: O(log n) however entries overlap.
func (m *PerfMap) Lookup(addr uint64) (name string, off uint64, ok bool) {
	// The first range starting above addr; the one before may hold it.
	lo, hi := 0, len(m.segs)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if m.segs[mid].start <= addr {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo == 0 || addr >= m.segs[lo-1].end {
		return "", 0, false
	}
	e := &m.entries[m.segs[lo-1].entry]
	return e.name, addr - e.start, true
}

// Len is the number of entries.
func (m *PerfMap) Len() int { return len(m.entries) }
