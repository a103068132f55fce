package symbolize

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// perfOracle is Lookup by a scan of every entry: the last written of
// those holding addr.
func perfOracle(m *PerfMap, addr uint64) (string, uint64, bool) {
	best := -1
	for i, e := range m.entries {
		if addr >= e.start && addr < e.end && (best < 0 || e.seq > m.entries[best].seq) {
			best = i
		}
	}
	if best < 0 {
		return "", 0, false
	}
	return m.entries[best].name, addr - m.entries[best].start, true
}

// TestPerfMapOverlapsOracle: random overlapping maps give the scan's
// answer at every boundary and a random address of each range.
func TestPerfMapOverlapsOracle(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 300 {
		var b strings.Builder
		n := 1 + r.IntN(40)
		for i := range n {
			fmt.Fprintf(&b, "%x %x f%d\n", r.Uint64N(200), 1+r.Uint64N(60), i)
		}
		m, err := ParsePerfMap(strings.NewReader(b.String()))
		if err != nil {
			t.Fatal(err)
		}
		for a := uint64(0); a < 270; a++ {
			gn, go_, gok := m.Lookup(a)
			wn, wo, wok := perfOracle(m, a)
			if gn != wn || go_ != wo || gok != wok {
				t.Fatalf("round %d, %#x: %q+%d %v, want %q+%d %v\n%s", round, a, gn, go_, gok, wn, wo, wok, b.String())
			}
		}
	}
}

// hugePerfMap is one entry spanning nearly the address space, written
// first, and n small disjoint ones after it, inside it, with gaps.
func hugePerfMap(tb testing.TB, n int) *PerfMap {
	var b bytes.Buffer
	fmt.Fprintf(&b, "1000 %x huge\n", uint64(1)<<62)
	for i := range n {
		fmt.Fprintf(&b, "%x 10 small%d\n", 0x100000+uint64(i)*0x40, i)
	}
	m, err := ParsePerfMap(&b)
	if err != nil || m.Len() != n+1 {
		tb.Fatalf("%d entries, %v", m.Len(), err)
	}
	return m
}

// TestPerfMapHugeEntry: with one huge entry and 100,000 small ones,
// 100,000 lookups in the gaps (named by the huge one) and in the small
// ones take well under 3 s (50 ms here): a scan back over the entries (the old
// Lookup) makes each lookup O(n), and ran 31,744 pairs in 2 s.
func TestPerfMapHugeEntry(t *testing.T) {
	const n = 100_000
	m := hugePerfMap(t, n)
	start := time.Now()
	deadline := start.Add(3 * time.Second)
	for i := range n {
		a := 0x100000 + uint64(i)*0x40
		if name, off, ok := m.Lookup(a + 0x20); !ok || name != "huge" || off != a+0x20-0x1000 {
			t.Fatalf("%#x: %q+%#x %v, want huge", a+0x20, name, off, ok)
		}
		if name, off, ok := m.Lookup(a + 4); !ok || name != fmt.Sprintf("small%d", i) || off != 4 {
			t.Fatalf("%#x: %q+%#x %v", a+4, name, off, ok)
		}
		if i%1024 == 0 && time.Now().After(deadline) {
			t.Fatalf("%d of %d lookup pairs after %v: lookups are not O(log n)", i, n, time.Since(start))
		}
	}
	t.Logf("%d lookups in %v", 2*n, time.Since(start))
}

// BenchmarkPerfMapHugeEntry: a lookup in a gap of hugePerfMap, by the
// number of small entries (O(log n): the time grows by a few ns per
// doubling).
func BenchmarkPerfMapHugeEntry(b *testing.B) {
	for _, n := range []int{1000, 10_000, 100_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			m := hugePerfMap(b, n)
			i := 0
			for b.Loop() {
				m.Lookup(0x100000 + uint64(i%n)*0x40 + 0x20)
				i++
			}
		})
	}
}
