package debuginfo

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"slices"
	"unsafe"
)

// A line index is what Lines.Frames answers for every address of one
// file, written out flat: the addresses where the answer may change (the
// bounds of every unit range, line row, function range and inlined-call
// range), each with the answer from there to the next one. The answer of
// an address is then a binary search and a few loads away, with no DWARF
// decompressed or decoded: symbolize keeps one per build ID in a cache
// directory (IndexCache) so that a second run starts from it.
//
// Every comparison Lines.Frames makes of an address is with one of those
// bounds, so its answer is the same from one bound to the next: the index
// holds, for each, the answer Lines.Frames gave at it, and answers every
// address exactly as the Lines it was built from (TestLineIndexSame).
//
// Layout (little-endian; counts and lengths are u32):
//
//	magic "PKLINDX\n", version, key length, intervals, frames, chains,
//	strings, string bytes, bucket shift, buckets, symbols, bucket base u64,
//	flags, 0 (64 bytes)
//	key                 the caller's identity of the DWARF it was built from, padded to 8
//	addrs   [intervals] u64, strictly increasing from 0: an interval's start
//	buckets [buckets+1] bucket i: how many addrs are at or below base + i<<shift
//	recs    [intervals] {chain, file, line, symbol}: chain noChain for no
//	                    frames, symbol noChain for none
//	syms    [symbols]   {name, 0, start u64}: a function of the symbol table
//	chains  [chains+1]  the first frame of each chain in frames; the last is frames
//	frames  [frames]    {name, file, line, flags, entry u64}: a chain is its
//	                    frames innermost first; the innermost's file and line
//	                    are the interval's
//	bytes               the strings, each its length (u32) then its bytes;
//	                    a string is named by its offset here
//	crc                 CRC-32C (Castagnoli) of everything before it
//
// An index is a parser input: ReadLineIndex checks its size against its
// counts before anything else, its checksum, and every reference in it,
// so that lookups need no checks but Go's own; it allocates nothing by
// its counts (the tables are views of the bytes given).

const (
	lineIndexMagic = "PKLINDX\n"
	// LineIndexVersion is the format version of a line index: an index
	// of another version is rebuilt.
	LineIndexVersion = 2

	lineIndexHeader = 64
	recSize         = 16
	symSize         = 16
	// flagSymbols says the index holds the symbol table's answers
	// (IndexSymbols).
	flagSymbols = 1
	frameSize   = 24
	// noChain is the chain of an interval without frames.
	noChain = math.MaxUint32
	// maxIndexChain bounds a chain (Lines.Frames gives at most 32).
	maxIndexChain = 64
	// maxIndexKey bounds the key: build IDs and file sizes.
	maxIndexKey = 4 << 10

	frameInlined = 1 // SourceFrame.Inlined
	frameError   = 2 // a LinesError: name is Msg, file Section, entry Off
)

// ErrIndexKey indicates a line index built from other DWARF than the
// key given names (another build, another debug file): it is rebuilt.
var ErrIndexKey = errors.New("line index is of other debug information")

// IndexError is a malformed line index: the offset in it and what was
// wrong.
type IndexError struct {
	Off uint64
	Msg string
}

func (e *IndexError) Error() string {
	return fmt.Sprintf("malformed line index at %#x: %s", e.Off, e.Msg)
}

// LineIndex answers Frames from a line index. It is immutable and safe
// for concurrent use; the strings it returns share its bytes.
type LineIndex struct {
	b                           []byte
	addrs, recs, chains, frames []byte
	strBytes                    []byte
	nAddrs, nChains, nFrames    int
	syms                        []byte
	nSyms                       int
	withSymbols                 bool
	// buckets narrow the search of addrs (see bucketTable).
	buckets  []byte
	base     uint64
	shift    uint
	nBuckets int
}

// ReadLineIndex checks b, a line index, and returns it; b is kept and
// must not change. key must be the key it was written with: another is
// ErrIndexKey. A malformed index is an *IndexError.
func ReadLineIndex(b []byte, key []byte) (*LineIndex, error) {
	return readLineIndex(b, key, true)
}

// readLineIndex is ReadLineIndex; without sums, the checksum and the key
// are not checked (for the fuzz test, whose inputs get past them only
// by chance).
func readLineIndex(b []byte, key []byte, sums bool) (*LineIndex, error) {
	if len(b) < lineIndexHeader+4 || string(b[:8]) != lineIndexMagic {
		return nil, &IndexError{0, "not a line index"}
	}
	le := binary.LittleEndian
	if v := le.Uint32(b[8:]); v != LineIndexVersion {
		return nil, fmt.Errorf("%w: format version %d, want %d", ErrIndexKey, v, LineIndexVersion)
	}
	var c [10]uint64
	for i := range c {
		c[i] = uint64(le.Uint32(b[12+4*i:]))
	}
	keyLen, nAddrs, nFrames, nChains, nStrs, nBytes, shift, nBuckets, nSyms := c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8]
	flags := le.Uint32(b[56:])
	if flags&^flagSymbols != 0 || le.Uint32(b[60:]) != 0 {
		return nil, &IndexError{56, fmt.Sprintf("flags %#x", flags)}
	}
	if shift >= 64 {
		return nil, &IndexError{40, fmt.Sprintf("bucket shift %d", shift)}
	}
	// Each count is below 2^32, so no sum below overflows.
	off := uint64(lineIndexHeader)
	at := func(n uint64) uint64 { o := off; off += n; return o }
	keyOff := at((keyLen + 7) &^ 7)
	addrsOff := at(8 * nAddrs)
	bucketsOff := at(4 * (nBuckets + 1))
	recsOff := at(recSize * nAddrs)
	symsOff := at(symSize * nSyms)
	chainsOff := at(4 * (nChains + 1))
	framesOff := at(frameSize * nFrames)
	bytesOff := at(nBytes)
	_ = nStrs // how many strings the bytes hold
	if off+4 != uint64(len(b)) {
		return nil, &IndexError{12, fmt.Sprintf("counts give %d bytes, the index has %d", off+4, len(b))}
	}
	if sums && crc32.Checksum(b[:off], castagnoli) != le.Uint32(b[off:]) {
		return nil, &IndexError{off, "checksum mismatch"}
	}
	if sums && string(b[keyOff:keyOff+keyLen]) != string(key) {
		return nil, ErrIndexKey
	}
	x := &LineIndex{
		b:           b,
		addrs:       b[addrsOff:bucketsOff],
		buckets:     b[bucketsOff:recsOff],
		base:        le.Uint64(b[48:]),
		shift:       uint(shift),
		nBuckets:    int(nBuckets),
		recs:        b[recsOff:symsOff],
		syms:        b[symsOff:chainsOff],
		nSyms:       int(nSyms),
		withSymbols: flags&flagSymbols != 0,
		chains:      b[chainsOff:framesOff],
		frames:      b[framesOff:bytesOff],
		strBytes:    b[bytesOff:off],
		nAddrs:      int(nAddrs), nChains: int(nChains), nFrames: int(nFrames),
	}
	if err := x.check(addrsOff, recsOff, symsOff, chainsOff, framesOff); err != nil {
		return nil, err
	}
	return x, nil
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// check checks every reference of x: what lookups then index by.
func (x *LineIndex) check(addrsOff, recsOff, symsOff, chainsOff, framesOff uint64) error {
	le := binary.LittleEndian
	if x.nAddrs == 0 || le.Uint64(x.addrs) != 0 {
		return &IndexError{addrsOff, "the first interval does not start at 0"}
	}
	for i := 1; i < x.nAddrs; i++ {
		if le.Uint64(x.addrs[8*i:]) <= le.Uint64(x.addrs[8*i-8:]) {
			return &IndexError{addrsOff + 8*uint64(i), "interval starts out of order"}
		}
	}
	// The buckets must be the addresses' own: checked by counting.
	k := 0
	for i := 0; i <= x.nBuckets; i++ {
		start := x.base + uint64(i)<<x.shift
		if i > 0 && start>>x.shift != x.base>>x.shift+uint64(i) {
			return &IndexError{40, "buckets past the address space"}
		}
		for k < x.nAddrs && le.Uint64(x.addrs[8*k:]) <= start {
			k++
		}
		if int(le.Uint32(x.buckets[4*i:])) != k {
			return &IndexError{recsOff - 4*uint64(x.nBuckets+1-i), "bucket count is not the addresses'"}
		}
	}
	prev := uint32(0)
	for i := 0; i <= x.nChains; i++ {
		s := le.Uint32(x.chains[4*i:])
		if i == 0 && s != 0 || i > 0 && (s <= prev || s-prev > maxIndexChain) || i == x.nChains && int(s) != x.nFrames {
			return &IndexError{chainsOff + 4*uint64(i), "chain bounds out of order or past the frames"}
		}
		prev = s
	}
	for i := 0; i < x.nFrames; i++ {
		f := x.frames[frameSize*i:]
		if !x.okStr(le.Uint32(f)) || !x.okStr(le.Uint32(f[4:])) || le.Uint32(f[8:]) > math.MaxInt32 || le.Uint32(f[12:]) > frameInlined|frameError {
			return &IndexError{framesOff + frameSize*uint64(i), "frame names a string past the table, or bad line or flags"}
		}
	}
	for i := 0; i < x.nSyms; i++ {
		if !x.okStr(le.Uint32(x.syms[symSize*i:])) || le.Uint32(x.syms[symSize*i+4:]) != 0 {
			return &IndexError{symsOff + symSize*uint64(i), "symbol names a string past the table"}
		}
	}
	for i := 0; i < x.nAddrs; i++ {
		r := x.recs[recSize*i:]
		if c := le.Uint32(r); c != noChain && c >= uint32(x.nChains) || !x.okStr(le.Uint32(r[4:])) || le.Uint32(r[8:]) > math.MaxInt32 ||
			le.Uint32(r[12:]) != noChain && le.Uint32(r[12:]) >= uint32(x.nSyms) {
			return &IndexError{recsOff + recSize*uint64(i), "interval names a chain, string or symbol past the tables, or bad line"}
		}
	}
	return nil
}

// Intervals is the number of intervals of constant answer.
func (x *LineIndex) Intervals() int { return x.nAddrs }

// Size is the size of the index in bytes.
func (x *LineIndex) Size() int64 { return int64(len(x.b)) }

// okStr reports whether a string at off lies in the string bytes.
func (x *LineIndex) okStr(off uint32) bool {
	n := uint64(len(x.strBytes))
	return uint64(off)+4 <= n && uint64(off)+4+uint64(binary.LittleEndian.Uint32(x.strBytes[off:])) <= n
}

func (x *LineIndex) str(off uint32) string {
	n := binary.LittleEndian.Uint32(x.strBytes[off:])
	if n == 0 {
		return ""
	}
	return unsafe.String(&x.strBytes[off+4], int(n))
}

// Frames is Lines.Frames from the index: the inline chain of the
// link-time address pc appended to dst, innermost first.
func (x *LineIndex) Frames(dst []SourceFrame, pc uint64) ([]SourceFrame, error) {
	return x.chainOf(dst, x.rec(pc))
}

// IndexSymbol is a function of the symbol table an index holds.
type IndexSymbol struct {
	Name  string
	Start uint64
}

// HasSymbols reports whether the index holds the symbol table's answers
// (AppendIndex was given IndexSymbols).
func (x *LineIndex) HasSymbols() bool { return x.withSymbols }

// Lookup is Frames and the symbol table's function holding pc at once;
// ok is false when no function holds pc (or the index holds no
// symbols).
func (x *LineIndex) Lookup(dst []SourceFrame, pc uint64) (frames []SourceFrame, sym IndexSymbol, ok bool, err error) {
	return x.lookupRec(dst, x.rec(pc))
}

func (x *LineIndex) lookupRec(dst []SourceFrame, r []byte) (frames []SourceFrame, sym IndexSymbol, ok bool, err error) {
	if s := binary.LittleEndian.Uint32(r[12:]); s != noChain {
		e := x.syms[symSize*s:]
		sym, ok = IndexSymbol{x.str(binary.LittleEndian.Uint32(e)), binary.LittleEndian.Uint64(e[8:])}, true
	}
	frames, err = x.chainOf(dst, r)
	return frames, sym, ok, err
}

// rec returns the record of the interval holding pc.
func (x *LineIndex) rec(pc uint64) []byte {
	return x.recs[recSize*x.interval(pc):]
}

// Locate appends to dst the interval holding each of pcs, for
// LookupInterval. It also loads what the lookups of those intervals
// read (record, symbol, chain, first frame, strings) in passes over the
// batch whose loads do not depend on each other, so that the processor
// has many cache misses in flight at once instead of one: the lookups
// after it find their memory cached. Batches of a few hundred are what
// the caches hold; symbolize.File.FramesOf uses 256, and names 100,000
// scattered libc addresses in 140 ns each against 175 ns by Lookup
// (symbolize's BenchmarkFileManyLines).
func (x *LineIndex) Locate(dst []uint32, pcs []uint64) []uint32 {
	le := binary.LittleEndian
	n := len(dst)
	var sink uint32
	for _, pc := range pcs {
		b := max(x.bucket(pc), 0)
		sink += uint32(x.buckets[4*b])
		dst = append(dst, uint32(b))
	}
	for _, b := range dst[n:] {
		sink += uint32(x.addrs[8*min(int(le.Uint32(x.buckets[4*b:])), x.nAddrs-1)])
	}
	for k, pc := range pcs {
		dst[n+k] = uint32(x.interval(pc))
	}
	for _, i := range dst[n:] {
		sink += uint32(x.recs[recSize*i])
	}
	for _, i := range dst[n:] {
		r := x.recs[recSize*i:]
		if c := le.Uint32(r); c != noChain {
			sink += uint32(x.chains[4*c])
		}
		if s := le.Uint32(r[12:]); s != noChain {
			sink += uint32(x.syms[symSize*s])
		}
		sink += uint32(x.strBytes[le.Uint32(r[4:])])
	}
	for _, i := range dst[n:] {
		r := x.recs[recSize*i:]
		if c := le.Uint32(r); c != noChain {
			sink += uint32(x.frames[frameSize*le.Uint32(x.chains[4*c:])])
		}
		if s := le.Uint32(r[12:]); s != noChain {
			sink += uint32(x.strBytes[le.Uint32(x.syms[symSize*s:])])
		}
	}
	for _, i := range dst[n:] {
		r := x.recs[recSize*i:]
		if c := le.Uint32(r); c != noChain {
			sink += uint32(x.strBytes[le.Uint32(x.frames[frameSize*le.Uint32(x.chains[4*c:]):])])
		}
	}
	locateSink = sink
	return dst
}

// locateSink keeps Locate's loads from being compiled away.
var locateSink uint32

// LookupInterval is Lookup of an address in interval i, which Locate
// found for it (an interval Locate did not return panics).
func (x *LineIndex) LookupInterval(dst []SourceFrame, i uint32) (frames []SourceFrame, sym IndexSymbol, ok bool, err error) {
	return x.lookupRec(dst, x.recs[recSize*i:])
}

// interval returns the interval holding pc.
func (x *LineIndex) interval(pc uint64) int {
	le := binary.LittleEndian
	lo, hi := 0, x.nAddrs
	// Bucket i holds base + i<<shift; the answer (the first address
	// above pc) lies between the counts at pc's bucket and the next.
	switch b := x.bucket(pc); {
	case b < 0:
		hi = int(le.Uint32(x.buckets))
	case b < x.nBuckets:
		lo, hi = int(le.Uint32(x.buckets[4*b:])), int(le.Uint32(x.buckets[4*b+4:]))
	default:
		lo = int(le.Uint32(x.buckets[4*x.nBuckets:]))
	}
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if le.Uint64(x.addrs[8*m:]) <= pc {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo - 1
}

// bucket returns the bucket of pc: -1 below the first, nBuckets past
// the last.
func (x *LineIndex) bucket(pc uint64) int {
	switch {
	case pc < x.base:
		return -1
	case (pc-x.base)>>x.shift < uint64(x.nBuckets):
		return int((pc - x.base) >> x.shift)
	}
	return x.nBuckets
}

func (x *LineIndex) chainOf(dst []SourceFrame, r []byte) ([]SourceFrame, error) {
	le := binary.LittleEndian
	c := le.Uint32(r)
	if c == noChain {
		return dst, nil
	}
	first, end := le.Uint32(x.chains[4*c:]), le.Uint32(x.chains[4*c+4:])
	for k := first; k < end; k++ {
		f := x.frames[frameSize*k:]
		flags := le.Uint32(f[12:])
		if flags&frameError != 0 {
			return dst, &LinesError{Section: x.str(le.Uint32(f[4:])), Off: le.Uint64(f[16:]), Msg: x.str(le.Uint32(f))}
		}
		sf := SourceFrame{Function: x.str(le.Uint32(f)), Inlined: flags&frameInlined != 0, Entry: le.Uint64(f[16:])}
		if k == first {
			sf.File, sf.Line = x.str(le.Uint32(r[4:])), int(le.Uint32(r[8:]))
		} else {
			sf.File, sf.Line = x.str(le.Uint32(f[4:])), int(le.Uint32(f[8:]))
		}
		dst = append(dst, sf)
	}
	return dst, nil
}

// IndexSymbols is a symbol table an index answers for besides the
// DWARF (LineIndex.Lookup), so that its user need not read it either.
type IndexSymbols struct {
	// Bounds are the addresses where At's answer may change: the start
	// and end of every function.
	Bounds []uint64
	// At is the function holding pc: its name and start.
	At func(pc uint64) (name string, start uint64, ok bool)
}

// AppendIndex appends the line index of l, with key, to b and returns
// it; with syms, the index holds its answers too. It reads every unit of
// l (under LinesOptions.MaxBytes, units read again when dropped) and asks
// Frames (and syms.At) at every bound.
func (l *Lines) AppendIndex(b []byte, key []byte, syms *IndexSymbols) ([]byte, error) {
	if len(key) > maxIndexKey {
		return nil, fmt.Errorf("line index key of %d bytes, more than %d", len(key), maxIndexKey)
	}
	bounds := l.bounds()
	flags := uint32(0)
	if syms != nil {
		flags = flagSymbols
		bounds = append(bounds, syms.Bounds...)
		slices.Sort(bounds)
		bounds = slices.Compact(bounds)
	}
	w := indexWriter{strs: map[string]uint32{}, chainIDs: map[string]uint32{}, symIDs: map[indexSym]uint32{}}
	w.str("")
	var buf []SourceFrame
	prev := [4]uint32{noChain - 1}
	for _, pc := range bounds {
		var err error
		buf, err = l.Frames(buf[:0], pc)
		rec := w.answer(buf, err)
		rec[3] = noChain
		if syms != nil {
			if name, start, ok := syms.At(pc); ok {
				rec[3] = w.symbol(name, start)
			}
		}
		if rec == prev {
			continue
		}
		prev = rec
		w.addrs = append(w.addrs, pc)
		w.recs = append(w.recs, rec)
	}
	if len(w.addrs) >= math.MaxUint32 || len(w.frames) >= math.MaxUint32 || len(w.strBytes) >= math.MaxUint32-4 || len(w.syms) >= math.MaxUint32 {
		return nil, errors.New("line index too large")
	}
	le := binary.LittleEndian
	base, shift, buckets := bucketTable(w.addrs)
	start := len(b)
	b = slices.Grow(b, lineIndexHeader+len(key)+8+len(w.addrs)*(8+recSize)+symSize*len(w.syms)+4*len(buckets)+4*len(w.chains)+4+
		frameSize*len(w.frames)+len(w.strBytes)+4)
	b = append(b, lineIndexMagic...)
	for _, v := range []int{LineIndexVersion, len(key), len(w.addrs), len(w.frames), len(w.chains), len(w.strs), len(w.strBytes), int(shift), len(buckets) - 1, len(w.syms)} {
		b = le.AppendUint32(b, uint32(v))
	}
	b = le.AppendUint64(b, base)
	b = le.AppendUint32(le.AppendUint32(b, flags), 0)
	b = append(b, key...)
	for (len(b)-start)%8 != 0 {
		b = append(b, 0)
	}
	for _, a := range w.addrs {
		b = le.AppendUint64(b, a)
	}
	for _, n := range buckets {
		b = le.AppendUint32(b, n)
	}
	for _, r := range w.recs {
		b = le.AppendUint32(le.AppendUint32(le.AppendUint32(le.AppendUint32(b, r[0]), r[1]), r[2]), r[3])
	}
	for _, s := range w.syms {
		b = le.AppendUint64(le.AppendUint32(le.AppendUint32(b, s.name), 0), s.start)
	}
	for _, c := range w.chains {
		b = le.AppendUint32(b, c)
	}
	b = le.AppendUint32(b, uint32(len(w.frames)))
	for _, f := range w.frames {
		b = le.AppendUint32(le.AppendUint32(le.AppendUint32(le.AppendUint32(b, f.name), f.file), f.line), f.flags)
		b = le.AppendUint64(b, f.entry)
	}
	b = append(b, w.strBytes...)
	return le.AppendUint32(b, crc32.Checksum(b[start:], castagnoli)), nil
}

// bucketTable cuts the span of addrs (ascending, from 0) above the
// first into about one bucket per two addresses: the first address
// above pc is then searched among a few, where a binary search of
// libc's 141,000 takes a cache miss at each of its last steps. It
// returns the base, the shift and, for each bucket i and one past the
// last, how many addrs are at or below base + i<<shift.
func bucketTable(addrs []uint64) (base uint64, shift uint, counts []uint32) {
	n := len(addrs)
	if n > 1 {
		base = addrs[1]
	}
	span := addrs[n-1] - base
	for span>>shift >= uint64(max(n/2, 1)) {
		shift++
	}
	nb := int(span>>shift) + 1
	counts = make([]uint32, 0, nb+1)
	k := 0
	for i := range nb + 1 {
		start := base + uint64(i)<<shift
		if i > 0 && start>>shift != base>>shift+uint64(i) {
			break // past 2^64: the last bucket runs to the end
		}
		for k < n && addrs[k] <= start {
			k++
		}
		counts = append(counts, uint32(k))
	}
	return base, shift, counts
}

// bounds returns, sorted and without repeats, 0 and every address at
// which a comparison of Frames may change: the bounds of the unit ranges
// and, of every unit, of its line rows, functions and inlined calls.
func (l *Lines) bounds() []uint64 {
	bs := make([]uint64, 1, 2*len(l.ranges)+1<<16)
	for _, r := range l.ranges {
		bs = append(bs, r.lo, r.hi)
	}
	for u := range l.units {
		t, err := l.table(u)
		if err != nil {
			continue
		}
		bs = append(bs, t.addrs...)
		for _, f := range t.funcs {
			bs = append(bs, f.lo, f.hi)
		}
		for _, nd := range t.nodes {
			if !nd.more {
				bs = append(bs, nd.lo, nd.hi)
			}
		}
		for _, r := range t.more {
			bs = append(bs, r[0], r[1])
		}
	}
	slices.Sort(bs)
	return slices.Compact(bs)
}

type indexFrame struct {
	name, file, line, flags uint32
	entry                   uint64
}

// indexWriter interns the strings and chains of an index being built.
type indexWriter struct {
	addrs    []uint64
	recs     [][4]uint32
	syms     []indexSym
	symIDs   map[indexSym]uint32
	chains   []uint32 // first frame of each
	frames   []indexFrame
	strBytes []byte
	strs     map[string]uint32
	chainIDs map[string]uint32
	key      []byte
}

func (w *indexWriter) str(s string) uint32 {
	if id, ok := w.strs[s]; ok {
		return id
	}
	id := uint32(len(w.strBytes))
	w.strs[s] = id
	w.strBytes = binary.LittleEndian.AppendUint32(w.strBytes, uint32(len(s)))
	w.strBytes = append(w.strBytes, s...)
	return id
}

// answer interns what Frames gave and returns the interval's record.
type indexSym struct {
	name  uint32
	start uint64
}

func (w *indexWriter) symbol(name string, start uint64) uint32 {
	s := indexSym{w.str(name), start}
	id, ok := w.symIDs[s]
	if !ok {
		id = uint32(len(w.syms))
		w.symIDs[s] = id
		w.syms = append(w.syms, s)
	}
	return id
}

func (w *indexWriter) answer(fs []SourceFrame, err error) [4]uint32 {
	var chain []indexFrame
	var file, line uint32
	var le *LinesError
	switch {
	case err != nil && errors.As(err, &le):
		chain = []indexFrame{{name: w.str(le.Msg), file: w.str(le.Section), flags: frameError, entry: le.Off}}
	case err != nil:
		chain = []indexFrame{{name: w.str(err.Error()), file: w.str(""), flags: frameError}}
	case len(fs) == 0:
		return [4]uint32{noChain, 0, 0, 0}
	case len(fs) > maxIndexChain:
		return [4]uint32{noChain, 0, 0, 0} // not given by Lines (32 at most)
	default:
		file, line = w.str(fs[0].File), uint32(max(fs[0].Line, 0))
		for k, f := range fs {
			xf := indexFrame{name: w.str(f.Function), entry: f.Entry}
			if f.Inlined {
				xf.flags = frameInlined
			}
			if k > 0 {
				xf.file, xf.line = w.str(f.File), uint32(max(f.Line, 0))
			}
			chain = append(chain, xf)
		}
	}
	w.key = w.key[:0]
	for _, f := range chain {
		w.key = binary.LittleEndian.AppendUint32(w.key, f.name)
		w.key = binary.LittleEndian.AppendUint32(w.key, f.file)
		w.key = binary.LittleEndian.AppendUint32(w.key, f.line)
		w.key = binary.LittleEndian.AppendUint32(w.key, f.flags)
		w.key = binary.LittleEndian.AppendUint64(w.key, f.entry)
	}
	id, ok := w.chainIDs[string(w.key)]
	if !ok {
		id = uint32(len(w.chains))
		w.chainIDs[string(w.key)] = id
		w.chains = append(w.chains, uint32(len(w.frames)))
		w.frames = append(w.frames, chain...)
	}
	return [4]uint32{id, file, line, 0}
}
