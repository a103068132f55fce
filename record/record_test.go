package record

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"os/exec"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/probekit/probekit/internal/features"
	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/interp"
	"github.com/probekit/probekit/procmaps"
)

func TestMain(m *testing.M) { os.Exit(testkit.RunWithLeakCheck(m)) }

// Decode's offsets are those clang gave struct event, and the defaults
// are those the package documents.
func TestEventLayout(t *testing.T) {
	spec, err := Spec()
	if err != nil {
		t.Fatal(err)
	}
	var ev *btf.Struct
	if err := spec.Types.TypeByName("event", &ev); err != nil {
		t.Fatal(err)
	}
	if ev.Size != HeaderSize {
		t.Errorf("struct event is %d bytes, HeaderSize %d", ev.Size, HeaderSize)
	}
	want := map[string]uint32{"cookie": 0, "pid": 8, "tid": 12, "arg_cnt": 16, "errors": 20, "str_args": 24, "ninterp": 26, "interp_stop": 27,
		"kind": 28, "nvals": 29, "nstrs": 30, "nframes": 31, "time_ns": 32, "comm": 40, "vals": 56}
	for _, m := range ev.Members {
		off, ok := want[m.Name]
		if !ok {
			t.Errorf("unexpected member %s", m.Name)
			continue
		}
		if m.Offset.Bytes() != off {
			t.Errorf("%s at %d, Decode reads %d", m.Name, m.Offset.Bytes(), off)
		}
		delete(want, m.Name)
	}
	if len(want) != 0 {
		t.Errorf("members missing: %v", want)
	}
	var sc *btf.Struct
	if err := spec.Types.TypeByName("scratch", &sc); err != nil {
		t.Fatal(err)
	}
	for _, m := range sc.Members {
		if m.Name == "buf" {
			if size, err := btf.Sizeof(m.Type); err != nil || size != MaxRecordSize {
				t.Errorf("scratch buffer %d bytes (%v), MaxRecordSize %d", size, err, MaxRecordSize)
			}
		}
	}
	if n := spec.Maps[EventsMapName].MaxEntries; n != DefaultRingSize {
		t.Errorf("ring buffer %d bytes, DefaultRingSize %d", n, DefaultRingSize)
	}
	var wake uint64
	if err := spec.Variables[WakeupBytesName].Get(&wake); err != nil || wake != 0 {
		t.Errorf("%s = %d (%v), want 0: the kernel's wakeups unless SetRingSize", WakeupBytesName, wake, err)
	}
}

// A record laid out by hand: header, values, strings back to back.
func TestDecode(t *testing.T) {
	ne := binary.NativeEndian
	b := make([]byte, HeaderSize, 128)
	ne.PutUint64(b, 0xdeadbeef00)
	ne.PutUint32(b[8:], 100)
	ne.PutUint32(b[12:], 101)
	ne.PutUint32(b[16:], 4)
	ne.PutUint32(b[20:], 0b1000)
	ne.PutUint32(b[24:], 0b1010) // values 1 and 3 read as strings
	b[28], b[29], b[30] = byte(KindUSDT), 4, 2
	for i := range 4 {
		b = ne.AppendUint64(b, uint64(int64(-i)))
	}
	b = append(b, "first\x00\x00"...) // the second string failed: ""
	b = append(b, "tail the program may leave"...)
	var e Event
	if err := e.Decode(b); err != nil {
		t.Fatal(err)
	}
	if e.Cookie != 0xdeadbeef00 || e.PID != 100 || e.TID != 101 || e.ArgCnt != 4 || e.Errors != 0b1000 ||
		e.NArgs != 4 || e.Args != [MaxArgs]int64{0, -1, -2, -3} || e.Kind != KindUSDT {
		t.Errorf("decoded %+v", e)
	}
	if s, ok := e.Str(1); !ok || string(s) != "first" {
		t.Errorf("Str(1) = %q %v", s, ok)
	}
	if s, ok := e.Str(3); !ok || len(s) != 0 {
		t.Errorf("Str(3) = %q %v", s, ok)
	}
	if _, ok := e.Str(2); ok {
		t.Error("Str(2): not a string argument")
	}
	if n := testing.AllocsPerRun(100, func() { e.Decode(b) }); n != 0 {
		t.Errorf("Decode allocates %v times", n)
	}
	again, err := e.AppendBinary(nil)
	if err != nil || string(again) != string(b[:len(again)]) || len(again) != HeaderSize+32+7 {
		t.Errorf("AppendBinary: %v\n%x\n%x", err, again, b)
	}
}

func TestDecodeRejects(t *testing.T) {
	good := Event{Cookie: 1, NArgs: 3, Args: [MaxArgs]int64{1, 2, 3}, StrArgs: 0b101,
		Strs: [MaxStrs][]byte{[]byte("a"), []byte("bc")}}
	rec, err := good.AppendBinary(nil)
	if err != nil {
		t.Fatal(err)
	}
	var e Event
	if err := e.Decode(rec); err != nil {
		t.Fatal(err)
	}
	for name, mutate := range map[string]func(b []byte) []byte{
		"short header":      func(b []byte) []byte { return b[:HeaderSize-1] },
		"short values":      func(b []byte) []byte { return b[:HeaderSize+23] },
		"unterminated":      func(b []byte) []byte { return b[:len(b)-1] },
		"kind":              func(b []byte) []byte { b[28] = 9; return b },
		"13 values":         func(b []byte) []byte { b[29] = 13; return b },
		"string count":      func(b []byte) []byte { b[30] = 1; return b },
		"string past value": func(b []byte) []byte { b[24] |= 0b1000; b[30] = 3; return b },
		"128 frames":        func(b []byte) []byte { b[31] = MaxFrames + 1; return b },
		"short frames":      func(b []byte) []byte { b[31] = 9; return b },
		"long string": func(b []byte) []byte {
			b = append(b[:HeaderSize+24], make([]byte, 2*StrLen)...)
			for i := range b[HeaderSize+24:] {
				b[HeaderSize+24+i] = 'x'
			}
			return b
		},
	} {
		b := mutate(append([]byte(nil), rec...))
		if err := e.Decode(b); !errors.Is(err, ErrBadEvent) {
			t.Errorf("%s: %v", name, err)
		}
	}
	for _, bad := range []Event{
		{NArgs: 13},
		{NArgs: 1, StrArgs: 0b10},
		{NArgs: 1, StrArgs: 1, Strs: [MaxStrs][]byte{[]byte("nul\x00")}},
		{NArgs: 1, StrArgs: 1, Strs: [MaxStrs][]byte{make([]byte, StrLen)}},
		{NFrames: MaxFrames + 1},
		{NInterp: MaxInterpFrames + 1},
	} {
		if _, err := bad.AppendBinary(nil); err == nil {
			t.Errorf("AppendBinary(%+v) accepted", bad)
		}
	}
}

// Decode faces whatever the ring holds: it fails or yields an event that
// encodes back to the bytes it read.
// A record's interpreter frames follow its native frames, before its
// strings.
func TestDecodeInterp(t *testing.T) {
	in := Event{Kind: KindUprobe, ArgCnt: 1, NArgs: 1, StrArgs: 1, Strs: [MaxStrs][]byte{[]byte("str")}, NFrames: 1, Frames: [MaxFrames]uint64{0x401000},
		NInterp: 2, InterpStop: 2, Interp: [MaxInterpFrames]interp.Raw{{Code: 0x7f00, Instr: 12}, {Code: 0x7f80, Instr: 4, Flags: interp.FlagRunEnd}}}
	b, err := in.AppendBinary(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != HeaderSize+8+8+2*InterpFrameSize+4 {
		t.Fatalf("record of %d bytes", len(b))
	}
	var e Event
	if err := e.Decode(b); err != nil {
		t.Fatal(err)
	}
	if got := e.InterpStack(); len(got) != 2 || got[0] != in.Interp[0] || got[1] != in.Interp[1] || e.InterpStop != 2 ||
		string(e.Strs[0]) != "str" || e.Stack()[0] != 0x401000 {
		t.Errorf("decoded %v stop %d, string %q, stack %v", got, e.InterpStop, e.Strs[0], e.Stack())
	}
	// A count past the record, or past the most the walk keeps.
	for _, n := range []byte{3, MaxInterpFrames + 1} {
		c := append([]byte(nil), b...)
		c[26] = n
		if err := e.Decode(c); err == nil {
			t.Errorf("%d interpreter frames accepted", n)
		}
	}
}

// A record with a stack copy (errors bit 31) gives the bytes after its
// strings as Copy, and the bit is not a value's error.
func TestDecodeCopy(t *testing.T) {
	in := Event{Kind: KindUprobe, ArgCnt: 2, NArgs: 2, Errors: 0b10, StrArgs: 0b1, Strs: [MaxStrs][]byte{[]byte("s")}, Copy: []byte("\x00copy\x00")}
	b, err := in.AppendBinary(nil)
	if err != nil {
		t.Fatal(err)
	}
	var e Event
	if err := e.Decode(b); err != nil {
		t.Fatal(err)
	}
	if string(e.Copy) != "\x00copy\x00" || e.Errors != 0b10 {
		t.Errorf("copy %q, errors %#b", e.Copy, e.Errors)
	}
	in.Copy = nil
	b, _ = in.AppendBinary(nil)
	if err := e.Decode(append(b, "tail"...)); err != nil || e.Copy != nil {
		t.Errorf("without the bit: copy %q (%v), want none", e.Copy, err)
	}
}

func FuzzDecode(f *testing.F) {
	for _, e := range []Event{
		{},
		{Cookie: 7, PID: 1, TID: 2, ArgCnt: 4, NArgs: 4, Args: [MaxArgs]int64{1, -2, 3, -4}},
		{ArgCnt: 12, NArgs: 12, Errors: 0b100000000001, StrArgs: 0b1111,
			Strs: [MaxStrs][]byte{[]byte("<string>"), []byte("probekit_fn"), nil, []byte(strings.Repeat("x", StrLen-1))}},
		{ArgCnt: -3},
		{Kind: KindUprobe, Cookie: 9, ArgCnt: 9, NArgs: 9, Args: [MaxArgs]int64{1, 3, 5, 7}, StrArgs: 0b10, Strs: [MaxStrs][]byte{[]byte("x")}},
		{Kind: KindUretprobe, Cookie: 2, ArgCnt: 1, NArgs: 1, Args: [MaxArgs]int64{-1}, TimeNS: 1 << 40, Comm: [CommLen]byte{'p', 'y'}},
		{Kind: KindUprobe, ArgCnt: 1, NArgs: 1, StrArgs: 1, Strs: [MaxStrs][]byte{[]byte("s")}, NFrames: 3, Frames: [MaxFrames]uint64{0x401000, 0x401234, 0x7f0000001000}},
		{Kind: KindUprobe, ArgCnt: 1, NArgs: 1, Errors: 1, StrArgs: 1, Strs: [MaxStrs][]byte{[]byte("s")}, Copy: []byte("a stack copy")},
		{Kind: KindUprobe, ArgCnt: 1, NArgs: 1, StrArgs: 1, Strs: [MaxStrs][]byte{[]byte("s")}, NFrames: 2, Frames: [MaxFrames]uint64{0x401000, 0x5000},
			NInterp: 2, InterpStop: 1, Interp: [MaxInterpFrames]interp.Raw{{Code: 0x7f00, Instr: 12}, {Code: 0x7f80, Instr: 4, Flags: interp.FlagRunEnd}}},
	} {
		b, err := e.AppendBinary(nil)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var e Event
		if e.Decode(b) != nil {
			return
		}
		again, err := e.AppendBinary(nil)
		if err != nil {
			t.Fatalf("decoded %+v does not encode: %v", e, err)
		}
		want := b[:len(again)]
		if string(again) != string(want) {
			t.Fatalf("re-encoded\n%x\nread\n%x", again, want)
		}
	})
}

// spec17 encodes a spec in libbpf 1.7's little-endian layout (struct
// __bpf_usdt_spec, 304 bytes) by hand; usdt's encoder has its own tests.
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

// attachFixture loads the program with opts and attaches it, with cookie
// 3, to sample_sema_fire of a running fixture, whose spec 3 it sets:
// sample_sema_fire(long round, int verbose) gives round in rdi (112),
// verbose in esi (104), a constant, and an argument marked unavailable
// (kind 4). The usdt cookie is fixtureCookie.
func attachFixture(t *testing.T, opts Options) (*Objects, *testkit.Process) {
	t.Helper()
	path := testkit.Fixture("usdt_sample")
	if opts.UprobeMulti {
		ok, err := features.Have(features.UprobeMulti)
		testkit.NeedFeature(t, ok, err, features.UprobeMulti.Since(), features.UprobeMulti.String())
	}
	// Without BPF cookies, the spec id comes from the IP map, as users
	// of such kernels get it.
	cookie, err := features.Have(features.Cookie)
	if err != nil {
		t.Fatal(err)
	}
	if !cookie {
		testkit.MissingFeature(t, features.Cookie.Since(), features.Cookie.String())
		opts.NoCookie = true
	}
	p := testkit.Start(t, path)
	objs, _, err := Load(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { objs.Close() })
	if !cookie {
		_, off := testkit.SymbolOffset(t, path, "sample_sema_fire")
		proc, err := procmaps.Open(p.PID())
		if err != nil {
			t.Fatal(err)
		}
		id, err := procmaps.IDOf(path)
		if err != nil {
			t.Fatal(err)
		}
		ip, err := proc.Address(id, off, procmaps.Exec)
		if err != nil {
			t.Fatal(err)
		}
		// usdt.bpf.h's struct __probekit_usdt_ip_key: the process
		// and the address.
		key := struct {
			PID uint32
			_   uint32
			IP  uint64
		}{PID: uint32(p.PID()), IP: ip}
		if err := objs.IPToSpecID.Update(key, uint32(3), ebpf.UpdateAny); err != nil {
			t.Fatal(err)
		}
	}
	spec := spec17(fixtureCookie,
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
	if opts.UprobeMulti {
		l, err = ex.UprobeMulti([]string{"sample_sema_fire"}, objs.Program,
			&link.UprobeMultiOptions{Cookies: []uint64{3}, PID: uint32(p.PID())})
	} else {
		var c uint64
		if cookie {
			c = 3
		}
		l, err = ex.Uprobe("sample_sema_fire", objs.Program, &link.UprobeOptions{Cookie: c, PID: p.PID()})
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return objs, p
}

const fixtureCookie = 4242

// TestKernelTrace attaches the program to a function of the fixture with
// a hand-made spec and checks the records: their values, their length,
// through the per-CPU buffer and through the ring itself (the path a
// program takes when it preempted another on its CPU).
func TestKernelTrace(t *testing.T) {
	testkit.RequireKernel(t)
	if !littleEndian() {
		t.Skip("hand-encoded spec is little-endian")
	}
	for _, c := range []struct {
		name           string
		multi, inPlace bool
	}{
		{"uprobe", false, false}, {"uprobe_multi", true, false}, {"uprobe_multi/in_place", true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			// Argument 1 (round 0, 1, 2: not pointers) read as a
			// string too: the read fails, the string is empty.
			objs, p := attachFixture(t, Options{UprobeMulti: c.multi, StrMask: 1})
			wantLen := HeaderSize + 8*4 + 1
			if c.inPlace {
				// Every CPU's buffer looks taken.
				busy := make([]traceScratch, ebpf.MustPossibleCPU())
				for i := range busy {
					busy[i].Users = 1
				}
				if err := objs.Scratch.Update(uint32(0), busy, ebpf.UpdateAny); err != nil {
					t.Fatal(err)
				}
				wantLen = MaxEventSize
			}
			rd, err := ringbuf.NewReader(objs.Events)
			if err != nil {
				t.Fatal(err)
			}
			defer rd.Close()

			start := monotonicNow(t)
			p.Fire("sema", 3)
			for r := range int64(3) {
				rd.SetDeadline(time.Now().Add(5 * time.Second))
				rec, err := rd.Read()
				if err != nil {
					t.Fatalf("round %d: %v", r, err)
				}
				if len(rec.RawSample) != wantLen {
					t.Errorf("round %d: record of %d bytes, want %d", r, len(rec.RawSample), wantLen)
				}
				var e Event
				if err := e.Decode(rec.RawSample); err != nil {
					t.Fatal(err)
				}
				s, ok := e.Str(0)
				e.Strs = [MaxStrs][]byte{}
				takeContext(t, &e, procComm(t, p.PID()), start)
				want := Event{Cookie: fixtureCookie, PID: uint32(p.PID()), TID: uint32(p.PID()), ArgCnt: 4,
					Errors: 1<<2 | 1, StrArgs: 1, NArgs: 4, Args: [MaxArgs]int64{r, -9, 0, 1}}
				if !reflect.DeepEqual(e, want) || !ok || len(s) != 0 {
					t.Errorf("round %d:\n got %+v (string %q %v)\nwant %+v", r, e, s, ok, want)
				}
			}
			if n, err := objs.DroppedCount(); err != nil || n != 0 {
				t.Errorf("dropped %d, %v", n, err)
			}
		})
	}
}

// With SetRingSize, the program does not wake a waiting reader for each
// record, only once a quarter of the ring is unread.
func TestKernelWakeup(t *testing.T) {
	testkit.RequireKernel(t)
	if !littleEndian() {
		t.Skip("hand-encoded spec is little-endian")
	}
	const ring = 64 << 10
	if ring < os.Getpagesize() {
		t.Skip("page larger than the test's ring")
	}
	objs, p := attachFixture(t, Options{RingSize: ring})
	rd, err := ringbuf.NewReader(objs.Events)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	recLen := HeaderSize + 8*4 + 8 // the kernel's record header included

	// A few records: a reader waiting without deadline is not woken
	// (it would be by the kernel's default for the first).
	read := make(chan error, 1)
	go func() {
		_, err := rd.Read()
		read <- err
	}()
	p.Fire("sema", 10)
	select {
	case err := <-read:
		t.Fatalf("reader woken by 10 records of %d bytes in a %d-byte ring (%v)", recLen, ring, err)
	case <-time.After(300 * time.Millisecond):
	}
	// Past a quarter: woken.
	if err := p.Loop("sema", ring/4/recLen); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-read:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("reader not woken with a quarter of the ring unread")
	}
	if n, err := objs.DroppedCount(); err != nil || n != 0 {
		t.Errorf("dropped %d, %v", n, err)
	}
}

func littleEndian() bool { return binary.NativeEndian.Uint16([]byte{1, 0}) == 1 }

// FuncCookie packs the index, the registers, the kind and the string
// mask where trace.c reads them, and refuses what the program cannot
// send.
func TestFuncCookie(t *testing.T) {
	c, err := FuncCookie(0xdeadbeef, RegsGo, KindUprobe, 0b101)
	if err != nil || c != 0xdeadbeef|1<<32|1<<40|0b101<<48 {
		t.Errorf("FuncCookie = %#x, %v", c, err)
	}
	if c, err := FuncCookie(0, RegsC, KindUprobe, 0); err != nil || c == 0 {
		t.Errorf("cookie of probe 0: %#x, %v; want non-zero", c, err)
	}
	for _, bad := range []struct {
		regs Regs
		kind Kind
		strs uint32
	}{{RegsC, KindUSDT, 0}, {RegsRet + 1, KindUprobe, 0}, {RegsC, KindUretprobe + 1, 0}, {RegsC, KindUprobe, 1 << MaxArgs}} {
		if _, err := FuncCookie(1, bad.regs, bad.kind, bad.strs); err == nil {
			t.Errorf("FuncCookie(%+v) accepted", bad)
		}
	}
}

// funcProbe is one probe of TestKernelFunc: trace_func on a function of
// a fixture, with a cookie.
type funcProbe struct {
	sym    string
	ret    bool
	cookie uint64
}

// runFuncProbes loads trace_func (for uprobe_multi links or perf-event
// uprobes), attaches it to path's functions as probes say, runs path with
// args and stdin, and returns the records of that process, in order.
func runFuncProbes(t *testing.T, multi bool, probes []funcProbe, stdin, path string, args ...string) []Event {
	t.Helper()
	// trace_func takes its probe from the BPF cookie.
	ok, err := features.Have(features.Cookie)
	testkit.NeedFeature(t, ok, err, features.Cookie.Since(), features.Cookie.String())
	if multi {
		ok, err := features.Have(features.UprobeMulti)
		testkit.NeedFeature(t, ok, err, features.UprobeMulti.Since(), features.UprobeMulti.String())
	}
	objs, _, err := Load(Options{UprobeMulti: multi, Programs: FuncProgram})
	if err != nil {
		t.Fatal(err)
	}
	defer objs.Close()
	if objs.Program != nil || objs.Specs != nil {
		t.Error("USDT program loaded without being asked for")
	}
	ex, err := link.OpenExecutable(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range probes {
		var l link.Link
		multiOpts := &link.UprobeMultiOptions{Cookies: []uint64{p.cookie}}
		switch {
		case multi && p.ret:
			l, err = ex.UretprobeMulti([]string{p.sym}, objs.FuncProgram, multiOpts)
		case multi:
			l, err = ex.UprobeMulti([]string{p.sym}, objs.FuncProgram, multiOpts)
		case p.ret:
			l, err = ex.Uretprobe(p.sym, objs.FuncProgram, &link.UprobeOptions{Cookie: p.cookie})
		default:
			l, err = ex.Uprobe(p.sym, objs.FuncProgram, &link.UprobeOptions{Cookie: p.cookie})
		}
		if errors.Is(err, ebpf.ErrNotSupported) {
			testkit.Unavailable(t, "%v", err)
		}
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
	}
	rd, err := ringbuf.NewReader(objs.Events)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	cmd := exec.Command(path, args...)
	cmd.Stdin = strings.NewReader(stdin)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", path, err, out)
	}
	var evs []Event
	for {
		rd.SetDeadline(time.Now().Add(200 * time.Millisecond))
		rec, err := rd.Read()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return evs
		}
		if err != nil {
			t.Fatal(err)
		}
		var e Event
		if err := e.Decode(rec.RawSample); err != nil {
			t.Fatal(err)
		}
		if int(e.PID) == cmd.Process.Pid {
			for k := range e.Strs {
				e.Strs[k] = bytes.Clone(e.Strs[k]) // the record is reused
			}
			evs = append(evs, e)
		}
	}
}

// trace_func reads the argument registers of the C calling convention at
// a function's entry, the return register at its return (through a
// uretprobe), and strings at the pointers in the arguments the cookie
// names. The fixture calls sum6(r, -2, 300, -40000, 5e9, -6e9) and
// count_char("probekit-func-args", '-') in rounds r = 0, 1, 2.
func TestKernelFunc(t *testing.T) {
	testkit.RequireKernel(t)
	if runtime.GOARCH != "amd64" {
		t.Skip("the fixture is built for x86-64")
	}
	path := testkit.Fixture("func_args")
	cookie := func(i uint32, regs Regs, kind Kind, strs uint32) uint64 {
		c, err := FuncCookie(i, regs, kind, strs)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	probes := []funcProbe{
		{"sum6", false, cookie(10, RegsC, KindUprobe, 0)},
		{"sum6", true, cookie(11, RegsRet, KindUretprobe, 0)},
		{"count_char", false, cookie(12, RegsC, KindUprobe, 1)},
	}
	for _, multi := range []bool{false, true} {
		t.Run(map[bool]string{false: "uprobe", true: "uprobe_multi"}[multi], func(t *testing.T) {
			start := monotonicNow(t)
			evs := runFuncProbes(t, multi, probes, "", path, "3")
			if len(evs) != 9 {
				t.Fatalf("%d records, want 9: %+v", len(evs), evs)
			}
			last := start
			for i := range evs {
				if evs[i].TimeNS < last {
					t.Errorf("record %d at %d, before the one before (%d)", i, evs[i].TimeNS, last)
				}
				last = evs[i].TimeNS
				takeContext(t, &evs[i], "func_args", start)
			}
			for r := range int64(3) {
				sum, ret, count := evs[3*r], evs[3*r+1], evs[3*r+2]
				want := Event{Kind: KindUprobe, Cookie: 10, PID: sum.PID, TID: sum.PID, ArgCnt: 6, NArgs: 6,
					Args: [MaxArgs]int64{r, -2, 300, -40000, 5000000000, -6000000000}}
				if !reflect.DeepEqual(sum, want) {
					t.Errorf("round %d sum6 entry:\n got %+v\nwant %+v", r, sum, want)
				}
				want = Event{Kind: KindUretprobe, Cookie: 11, PID: sum.PID, TID: sum.PID, ArgCnt: 1, NArgs: 1,
					Args: [MaxArgs]int64{r - 1000039702}}
				if !reflect.DeepEqual(ret, want) {
					t.Errorf("round %d sum6 return:\n got %+v\nwant %+v", r, ret, want)
				}
				s, ok := count.Str(0)
				if count.Kind != KindUprobe || count.Cookie != 12 || count.NArgs != 6 || count.StrArgs != 1 ||
					count.Errors != 0 || count.Args[1] != '-' || !ok || string(s) != "probekit-func-args" {
					t.Errorf("round %d count_char entry: %+v (string %q)", r, count, s)
				}
			}
		})
	}
}

// Go's register ABI: main.add(i, 2i+1) has i in rax and 2i+1 in rbx.
func TestKernelFuncGo(t *testing.T) {
	testkit.RequireKernel(t)
	if runtime.GOARCH != "amd64" {
		t.Skip("the fixture's registers are those of amd64")
	}
	c, err := FuncCookie(3, RegsGo, KindUprobe, 0)
	if err != nil {
		t.Fatal(err)
	}
	evs := runFuncProbes(t, false, []funcProbe{{"main.add", false, c}}, "add 4\nquit\n", testkit.Fixture("goprog"))
	if len(evs) != 4 {
		t.Fatalf("%d records, want 4: %+v", len(evs), evs)
	}
	for i, e := range evs {
		if e.Kind != KindUprobe || e.Cookie != 3 || e.NArgs != 9 || e.Args[0] != int64(i) || e.Args[1] != int64(2*i+1) {
			t.Errorf("call %d: %+v", i, e)
		}
	}
}

// Each bucket holds exactly the values from its low to its high, and the
// buckets tile the int64 range.
func TestBuckets(t *testing.T) {
	next := int64(math.MinInt64)
	for b := range NumBuckets {
		low, high := BucketRange(b)
		if low != next || Bucket(low) != b || Bucket(int64(high-1)) != b {
			t.Fatalf("bucket %d: [%d, %d), want from %d", b, low, high, next)
		}
		if b < NumBuckets-1 && Bucket(int64(high)) != b+1 {
			t.Fatalf("bucket %d: %d is in bucket %d", b, high, Bucket(int64(high)))
		}
		next = int64(high)
	}
	if Bucket(math.MaxInt64) != NumBuckets-1 {
		t.Fatal("MaxInt64 not in the last bucket")
	}
}

// monotonicNow reads CLOCK_MONOTONIC, bpf_ktime_get_ns's clock.
func monotonicNow(t *testing.T) uint64 {
	t.Helper()
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		t.Fatal(err)
	}
	return uint64(ts.Nano())
}

// procComm reads a process's command name.
func procComm(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSuffix(string(b), "\n")
}

// takeContext checks that e was recorded by comm between since and now,
// and clears its context for comparisons.
func takeContext(t *testing.T, e *Event, comm string, since uint64) {
	t.Helper()
	if now := monotonicNow(t); e.TimeNS < since || e.TimeNS > now {
		t.Errorf("record at %d, want from %d to %d", e.TimeNS, since, now)
	}
	if got := string(e.CommName()); got != comm {
		t.Errorf("record of command %q, want %q", got, comm)
	}
	e.TimeNS, e.Comm = 0, [CommLen]byte{}
}
