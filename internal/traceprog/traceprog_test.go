package traceprog

import (
	"encoding/binary"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/probekit/probekit/internal/testkit"
)

func TestMain(m *testing.M) { os.Exit(testkit.RunWithLeakCheck(m)) }

// UnmarshalBinary's offsets are those clang gave struct event.
func TestEventLayout(t *testing.T) {
	spec, err := Spec()
	if err != nil {
		t.Fatal(err)
	}
	var ev *btf.Struct
	if err := spec.Types.TypeByName("event", &ev); err != nil {
		t.Fatal(err)
	}
	if ev.Size != EventSize {
		t.Errorf("struct event is %d bytes, EventSize %d", ev.Size, EventSize)
	}
	want := map[string]uint32{"cookie": 0, "pid": 8, "tid": 12, "arg_cnt": 16, "errors": 20, "args": 24,
		"str_args": 24 + 8*MaxArgs, "pad": 28 + 8*MaxArgs, "strs": 32 + 8*MaxArgs}
	for _, m := range ev.Members {
		off, ok := want[m.Name]
		if !ok {
			t.Errorf("unexpected member %s", m.Name)
			continue
		}
		if m.Offset.Bytes() != off {
			t.Errorf("%s at %d, UnmarshalBinary reads %d", m.Name, m.Offset.Bytes(), off)
		}
		delete(want, m.Name)
	}
	if len(want) != 0 {
		t.Errorf("members missing: %v", want)
	}
	if n := spec.Maps[EventsMapName].MaxEntries; n != 1024*1024 {
		t.Errorf("ring buffer %d bytes, want 1 MiB", n)
	}
}

func TestUnmarshalBinary(t *testing.T) {
	b := make([]byte, EventSize)
	ne := binary.NativeEndian
	ne.PutUint64(b, 0xdeadbeef00)
	ne.PutUint32(b[8:], 100)
	ne.PutUint32(b[12:], 101)
	ne.PutUint32(b[16:], uint32(0xfffffffd)) // -ESRCH
	ne.PutUint32(b[20:], 0b1010)
	for i := range MaxArgs {
		ne.PutUint64(b[24+8*i:], uint64(int64(-i)))
	}
	// Arguments 1 and 3 read as strings: slots 0 and 1.
	ne.PutUint32(b[24+8*MaxArgs:], 0b1010)
	copy(b[32+8*MaxArgs:], "first\x00garbage")
	copy(b[32+8*MaxArgs+StrLen:], strings.Repeat("x", StrLen)) // no NUL: whole buffer
	var e Event
	if err := e.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	if e.Cookie != 0xdeadbeef00 || e.PID != 100 || e.TID != 101 || e.ArgCnt != -3 || e.Errors != 0b1010 || e.Args[11] != -11 || e.Args[1] != -1 {
		t.Errorf("decoded %+v", e)
	}
	if s, ok := e.Str(1); !ok || s != "first" {
		t.Errorf("Str(1) = %q %v", s, ok)
	}
	if s, ok := e.Str(3); !ok || s != strings.Repeat("x", StrLen) {
		t.Errorf("Str(3) = %q %v", s, ok)
	}
	if _, ok := e.Str(2); ok {
		t.Error("Str(2): not a string argument")
	}
	if err := e.UnmarshalBinary(b[:EventSize-1]); !errors.Is(err, ErrShortEvent) {
		t.Errorf("short record: %v", err)
	}
}

// spec17 encodes a spec in libbpf 1.7's little-endian layout
// (usdt-facts.md §4.2) by hand; usdt's encoder has its own tests.
func spec17(cookie uint64, args ...[5]int64) []byte {
	b := make([]byte, 304)
	le := binary.LittleEndian
	for i, a := range args { // type, val_off, reg_off, signed, size
		r := b[24*i:]
		r[8] = byte(a[0])
		le.PutUint64(r, uint64(a[1]))
		le.PutUint16(r[14:], uint16(a[2]))
		r[16] = byte(a[3])
		r[17] = byte(64 - 8*a[4])
	}
	le.PutUint64(b[288:], cookie)
	le.PutUint16(b[296:], uint16(len(args)))
	return b
}

// TestKernelTrace attaches the program to a function of the fixture with
// a hand-made spec and checks the events.
func TestKernelTrace(t *testing.T) {
	testkit.RequireKernel(t)
	if !littleEndian() {
		t.Skip("hand-encoded spec is little-endian")
	}
	for _, multi := range []bool{false, true} {
		name := "uprobe"
		if multi {
			name = "uprobe_multi"
		}
		t.Run(name, func(t *testing.T) {
			path := testkit.Fixture("usdt_sample")
			p := testkit.Start(t, path)
			objs, _, err := Load(Options{UprobeMulti: multi})
			if err != nil {
				t.Fatal(err)
			}
			defer objs.Close()
			// sample_sema_fire(long round, int verbose): round in rdi
			// (112), verbose in esi (104), a constant, and an argument
			// marked unavailable (kind 4).
			const cookie = 4242
			spec := spec17(cookie,
				[5]int64{1, 0, 112, 1, 8},
				[5]int64{0, -9, 0, 1, 4},
				[5]int64{4, 0, 0, 0, 8},
				[5]int64{1, 0, 104, 0, 4},
			)
			if err := objs.Specs.Update(uint32(3), spec, ebpf.UpdateAny); err != nil {
				t.Fatal(err)
			}
			ex, err := link.OpenExecutable(path)
			if err != nil {
				t.Fatal(err)
			}
			var l link.Link
			if multi {
				l, err = ex.UprobeMulti([]string{"sample_sema_fire"}, objs.Program,
					&link.UprobeMultiOptions{Cookies: []uint64{3}, PID: uint32(p.PID())})
			} else {
				l, err = ex.Uprobe("sample_sema_fire", objs.Program, &link.UprobeOptions{Cookie: 3, PID: p.PID()})
			}
			if errors.Is(err, ebpf.ErrNotSupported) {
				testkit.Unavailable(t, "%s: %v", name, err)
			}
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			rd, err := ringbuf.NewReader(objs.Events)
			if err != nil {
				t.Fatal(err)
			}
			defer rd.Close()

			p.Fire("sema", 3)
			for r := range int64(3) {
				rd.SetDeadline(time.Now().Add(5 * time.Second))
				rec, err := rd.Read()
				if err != nil {
					t.Fatalf("round %d: %v", r, err)
				}
				var e Event
				if err := e.UnmarshalBinary(rec.RawSample); err != nil {
					t.Fatal(err)
				}
				want := Event{Cookie: cookie, PID: uint32(p.PID()), TID: uint32(p.PID()), ArgCnt: 4, Errors: 1 << 2,
					Args: [MaxArgs]int64{r, -9, 0, 1}}
				if e != want {
					t.Errorf("round %d:\n got %+v\nwant %+v", r, e, want)
				}
			}
			if n, err := objs.DroppedCount(); err != nil || n != 0 {
				t.Errorf("dropped %d, %v", n, err)
			}
		})
	}
}

func littleEndian() bool { return binary.NativeEndian.Uint16([]byte{1, 0}) == 1 }
