package record

import (
	"errors"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/cilium/ebpf/ringbuf"

	"github.com/probekit/probekit/internal/test/testkit"
)

// With the gate, hits before Arm leave nothing in the ring, not even a
// dropped count; the hits after it are recorded, each of them.
func TestKernelGate(t *testing.T) {
	testkit.RequireKernel(t)
	if !littleEndian() {
		t.Skip("hand-encoded spec is little-endian")
	}
	for _, gated := range []bool{false, true} {
		name := "ungated"
		if gated {
			name = "gated"
		}
		t.Run(name, func(t *testing.T) {
			objs, p := attachFixture(t, Options{Gated: gated})
			rd, err := ringbuf.NewReader(objs.Events)
			if err != nil {
				t.Fatal(err)
			}
			defer rd.Close()
			// Fire returns once the fixture has made its calls: the
			// program ran in the fixture's thread before that.
			p.Fire("sema", 3)
			before := readRounds(t, rd)
			if err := objs.Arm(); err != nil {
				t.Fatal(err)
			}
			p.Fire("sema", 2)
			after := readRounds(t, rd)
			want := []int64{0, 1, 2}
			if gated {
				want = nil
			}
			if !slices.Equal(before, want) {
				t.Errorf("before Arm: rounds %v, want %v", before, want)
			}
			if !slices.Equal(after, []int64{0, 1}) {
				t.Errorf("after Arm: rounds %v, want [0 1]", after)
			}
			if n, err := objs.DroppedCount(); err != nil || n != 0 {
				t.Errorf("dropped %d, %v", n, err)
			}
		})
	}
}

// readRounds returns the round (value 0) of each record in rd until none
// comes for a while.
func readRounds(t *testing.T, rd *ringbuf.Reader) []int64 {
	t.Helper()
	var out []int64
	for {
		rd.SetDeadline(time.Now().Add(300 * time.Millisecond))
		rec, err := rd.Read()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		var e Event
		if err := e.Decode(rec.RawSample); err != nil {
			t.Fatal(err)
		}
		if e.Cookie != fixtureCookie {
			t.Fatalf("record of cookie %d, want %d", e.Cookie, fixtureCookie)
		}
		out = append(out, e.Args[0])
	}
}
