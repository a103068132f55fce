package safeelf

import (
	"encoding/binary"
	"math/bits"
	"unsafe"
)

// nameIndex finds the entries of a table by name: open addressing over
// entry numbers, keyed by a hash of the name, the names themselves
// staying where they are (a string table). It costs 4 bytes per slot and
// at most 4 slots per entry; a Go map of 100k strings costs several times
// that.
type nameIndex struct {
	slots []uint32 // entry+1; 0 is empty
	mask  uint64
}

// newNameIndex indexes n entries by hash(i); entries for which hash
// returns ok == false (no name) are left out.
func newNameIndex(n int, hash func(int) (uint64, bool)) *nameIndex {
	size := uint64(4)
	for size < 2*uint64(n) {
		size <<= 1
	}
	x := &nameIndex{slots: make([]uint32, size), mask: size - 1}
	for i := range n {
		h, ok := hash(i)
		if !ok {
			continue
		}
		for h &= x.mask; x.slots[h] != 0; h = (h + 1) & x.mask {
		}
		x.slots[h] = uint32(i) + 1
	}
	return x
}

// lookup calls yield with each entry i for which is(i) holds among those
// filed under hash h, in index order (entries were inserted in increasing
// order and a probe sequence keeps that order), until yield returns
// false.
func (x *nameIndex) lookup(h uint64, is func(int) bool, yield func(int) bool) {
	for h &= x.mask; x.slots[h] != 0; h = (h + 1) & x.mask {
		i := int(x.slots[h] - 1)
		if is(i) && !yield(i) {
			return
		}
	}
}

// Names are hashed in one pass over their bytes, eight at a time, the
// terminating NUL found in the same pass (a NUL-terminated name's length
// is not known before): hashing every function name of a large binary
// while its table is read is then about as cheap as finding the names'
// ends. The mixing step is a 64x64->128-bit multiply folded to 64 bits,
// with a random seed per table, as wyhash does; it is not a keyed
// cryptographic hash, and is only ever trusted to tell names apart at one
// address (see Funcs) or to find candidates whose names are then
// compared.
const (
	hashP0 = 0xa0761d6478bd642f
	hashP1 = 0xe7037ed1a0b428db
	hashP2 = 0x8ebc6af09c88c6e3
)

func hashMix(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// hashCString hashes the bytes of b up to its first NUL (or its end) and
// returns the hash and that length.
func hashCString(b []byte, seed uint64) (h uint64, n int) {
	// Two lanes while sixteen bytes without a NUL remain: each mix waits
	// for the one before it in its lane, so two lanes halve the chain.
	h1, h2 := seed, seed^hashP2
	for len(b) >= 16 {
		w1, w2 := binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[8:])
		if hasZeroByte(w1)|hasZeroByte(w2) != 0 {
			break
		}
		h1 = hashMix(w1^hashP0, h1^hashP1)
		h2 = hashMix(w2^hashP0, h2^hashP1)
		n += 16
		b = b[16:]
	}
	h = h1 ^ h2*hashP2
	for len(b) >= 8 {
		w := binary.LittleEndian.Uint64(b)
		if z := hasZeroByte(w); z != 0 {
			k := bits.TrailingZeros64(z) / 8
			return hashTail(h, w&(1<<(8*k)-1), n+k), n + k
		}
		h = hashMix(w^hashP0, h^hashP1)
		n += 8
		b = b[8:]
	}
	var w uint64
	for i, c := range b {
		if c == 0 {
			break
		}
		w |= uint64(c) << (8 * i)
		n++
	}
	return hashTail(h, w, n), n
}

// hasZeroByte is non-zero when a byte of w is 0: the lowest such byte
// sets the top bit of its byte in the result (bytes above it may too,
// through the borrow).
func hasZeroByte(w uint64) uint64 { return (w - 0x0101010101010101) &^ w & 0x8080808080808080 }

func hashTail(h, w uint64, n int) uint64 {
	return hashMix(hashMix(w^hashP0, h^hashP1)^uint64(n), hashP2)
}

// hashString is hashCString of s, which has no NUL.
func hashString(s string, seed uint64) uint64 {
	h, _ := hashCString(unsafe.Slice(unsafe.StringData(s), len(s)), seed)
	return h
}
