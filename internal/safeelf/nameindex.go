package safeelf

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
