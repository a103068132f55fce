package safeelf

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestSortByAddr: the in-place radix sort orders like a comparison sort
// on (address, source and index), on spread addresses, clustered ones,
// and many entries at one address.
func TestSortByAddr(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		name string
		n    int
		addr func(i int) uint64
	}{
		{"spread", 50000, func(int) uint64 { return rng.Uint64() }},
		{"text", 50000, func(int) uint64 { return 0x400000 + rng.Uint64N(1<<24) }},
		{"clustered", 20000, func(int) uint64 { return 0x1000 + rng.Uint64N(64)*16 }},
		{"one address", 5000, func(int) uint64 { return 0x1234 }},
		{"small", 7, func(int) uint64 { return rng.Uint64N(4) }},
		{"empty", 0, nil},
	} {
		refs := make([]funcRef, tc.n)
		for i := range refs {
			refs[i] = mkRef(tc.addr(i), Source(1+rng.IntN(3)), rng.IntN(refIndex), rng.IntN(2) == 0, 0)
		}
		// collect appends in (source, index) order.
		slices.SortStableFunc(refs, func(a, b funcRef) int { return cmp.Compare(a.ref&^refGlobal, b.ref&^refGlobal) })
		want := slices.Clone(refs)
		slices.SortStableFunc(want, func(a, b funcRef) int {
			return cmp.Or(cmp.Compare(a.addr, b.addr), cmp.Compare(a.ref&^refGlobal, b.ref&^refGlobal))
		})
		sortByAddr(refs)
		for i := range refs {
			if refs[i].addr != want[i].addr || refs[i].ref&^refGlobal != want[i].ref&^refGlobal {
				t.Fatalf("%s: entry %d = %#x/%#x, want %#x/%#x", tc.name, i, refs[i].addr, refs[i].ref, want[i].addr, want[i].ref)
			}
		}
	}
}

// TestHashCString: a name hashes the same inside a string table (ended by
// its NUL, whatever follows) and as a Go string, and different names
// differ, at every length around the 8-byte word.
func TestHashCString(t *testing.T) {
	const seed = 0x1234
	seen := map[uint64]string{}
	for n := range 40 {
		name := strings.Repeat("x", n)
		for _, tail := range []string{"\x00", "\x00junk", "\x00\x00\x00\x00\x00\x00\x00\x00\x00"} {
			h, got := hashCString([]byte(name+tail), seed)
			if got != n || h != hashString(name, seed) {
				t.Errorf("%q+%q: length %d, hash %#x; hashString %#x", name, tail, got, h, hashString(name, seed))
			}
		}
		if h, got := hashCString([]byte(name), seed); got != n || h != hashString(name, seed) {
			t.Errorf("%q unterminated: length %d", name, got)
		}
		for _, s := range []string{name, name + "y", "y" + name} {
			h := hashString(s, seed)
			if other, ok := seen[h]; ok && other != s {
				t.Errorf("%q and %q collide", s, other)
			}
			seen[h] = s
		}
	}
	if hashString("malloc", 1) == hashString("malloc", 2) {
		t.Error("the seed changes nothing")
	}
}

func FuzzHashCString(f *testing.F) {
	f.Add("uv_fs_open", "\x00tail")
	f.Fuzz(func(t *testing.T, name, tail string) {
		if strings.IndexByte(name, 0) >= 0 {
			return
		}
		h, n := hashCString([]byte(name+"\x00"+tail), 7)
		if n != len(name) || h != hashString(name, 7) {
			t.Fatalf("%q: length %d, hash mismatch", name, n)
		}
	})
}
