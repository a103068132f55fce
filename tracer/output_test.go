package tracer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/record"
	"github.com/probekit/probekit/usdt"
)

// outputCase is a tracer writing to w with three sites of the fixture
// (cookies 0, 1, 2: sample:loop, sample:sizes, sample:sizes again) and
// two function probes (3: the entry of count_char at 0x1250, 4: the
// return of sum6 at 0x1230), and one record per site as the programs
// write them: 4 arguments; 8 of every size and sign, one unreadable; 8
// with the first two read as strings; 6 registers, the first read as a
// string; a return value.
func outputCase(tb testing.TB, asJSON bool, w io.Writer) (*tracer, [][]byte) {
	tb.Helper()
	f, err := usdt.Open(testkit.Fixture("usdt_sample"))
	if err != nil {
		tb.Fatal(err)
	}
	t := newTracer(&Config{JSON: asJSON}, w, io.Discard)
	// Hit times are shown as if CLOCK_MONOTONIC were 0 at
	// 2023-11-14T22:13:20Z.
	t.wallBase = 1_700_000_000_000_000_000
	for _, name := range []string{"loop", "sizes", "sizes"} {
		p, err := f.Find("sample", name)
		if err != nil {
			tb.Fatal(err)
		}
		t.cookie(p, 0)
	}
	t.funcSite(record.KindUprobe, "count_char", 0x1250)
	t.funcSite(record.KindUretprobe, "sum6", 0x1230)
	sizes := [record.MaxArgs]int64{-5, 250, -1234, 60000, -123456, 4000000000, -1234567890123, -616}
	var recs [][]byte
	for _, e := range []record.Event{
		{Cookie: 0, PID: 4242, TID: 4243, ArgCnt: 4, NArgs: 4, Args: [record.MaxArgs]int64{999999, 1000000, -999999, 999999},
			TimeNS: 5_000_000_123, Comm: [record.CommLen]byte{'s', 'a', 'm', 'p', 'l', 'e'}},
		{Cookie: 1, PID: 4242, TID: 4242, ArgCnt: 8, NArgs: 8, Args: sizes, Errors: 1 << 2},
		{Cookie: 2, PID: 1, TID: 1, ArgCnt: 8, NArgs: 8, Args: sizes, StrArgs: 0b11,
			Strs: [record.MaxStrs][]byte{[]byte("<string>"), []byte("quote\" tab\t \xff")}},
		{Kind: record.KindUprobe, Cookie: 3, PID: 7, TID: 8, ArgCnt: 6, NArgs: 6, Args: [record.MaxArgs]int64{0, -2, 3, -4, 5, 1 << 62},
			StrArgs: 1, Strs: [record.MaxStrs][]byte{[]byte("probekit-func-args")}, TimeNS: 7, Comm: [record.CommLen]byte{'f', '"'}},
		{Kind: record.KindUretprobe, Cookie: 4, PID: 7, TID: 8, ArgCnt: 1, NArgs: 1, Args: [record.MaxArgs]int64{-1000039702}, TimeNS: 3_600_000_000_000},
	} {
		rec, err := e.AppendBinary(nil)
		if err != nil {
			tb.Fatal(err)
		}
		recs = append(recs, rec)
	}
	return t, recs
}

// The lines say what the old encoding/json and fmt output said: unsigned
// arguments unsigned (sizes' last is a uint64), null for what could not
// be read, strings quoted as JSON without HTML escapes.
func TestTraceOutputLines(t *testing.T) {
	var out bytes.Buffer
	tr, recs := outputCase(t, false, &out)
	var ev record.Event
	for _, r := range recs {
		if err := tr.handle(r, &ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := tr.out.flush(); err != nil {
		t.Fatal(err)
	}
	loop, sizes := tr.sites[0].Location.Address, tr.sites[1].Location.Address
	want := fmt.Sprintf("4242/4243 sample:loop @%#x [999999 1000000 -999999 999999]\n", loop) +
		fmt.Sprintf("4242/4242 sample:sizes @%#x [-5 250 null 60000 -123456 4000000000 -1234567890123 18446744073709551000]\n", sizes) +
		fmt.Sprintf(`1/1 sample:sizes @%#x ["<string>" "quote\" tab\t \xff" -1234 60000 -123456 4000000000 -1234567890123 18446744073709551000]`+"\n", sizes) +
		`7/8 uprobe:count_char @0x1250 ["probekit-func-args" -2 3 -4 5 4611686018427387904]` + "\n" +
		"7/8 uretprobe:sum6 @0x1230 = -1000039702\n"
	if out.String() != want {
		t.Errorf("text:\n%s\nwant:\n%s", out.String(), want)
	}

	out.Reset()
	tr, recs = outputCase(t, true, &out)
	for _, r := range recs {
		if err := tr.handle(r, &ev); err != nil {
			t.Fatal(err)
		}
	}
	tr.out.flush()
	lines := strings.Split(out.String(), "\n")
	for i, want := range []string{
		fmt.Sprintf(`{"kind":"usdt","provider":"sample","name":"loop","pid":4242,"tid":4243,"comm":"sample","time_ns":5000000123,"time":"2023-11-14T22:13:25.000000123Z","address":%d,"args":[999999,1000000,-999999,999999]}`, loop),
		3: `{"kind":"uprobe","function":"count_char","pid":7,"tid":8,"comm":"f\"","time_ns":7,"time":"2023-11-14T22:13:20.000000007Z","address":4688,"args":["probekit-func-args",-2,3,-4,5,4611686018427387904]}`,
		4: `{"kind":"uretprobe","function":"sum6","pid":7,"tid":8,"comm":"","time_ns":3600000000000,"time":"2023-11-14T23:13:20Z","address":4656,"ret":-1000039702}`,
	} {
		if want != "" && lines[i] != want {
			t.Errorf("JSON line %d:\n%s\nwant\n%s", i, lines[i], want)
		}
	}
	type hit struct {
		Provider, Name string
		PID, TID       int
		Address        uint64
		Args           []json.RawMessage
	}
	var hits []hit
	for _, l := range lines[:3] {
		var h hit
		if err := json.Unmarshal([]byte(l), &h); err != nil {
			t.Fatalf("JSON line %q: %v", l, err)
		}
		hits = append(hits, h)
	}
	h := hits[2]
	if h.Provider != "sample" || h.Name != "sizes" || h.PID != 1 || h.TID != 1 || h.Address != sizes ||
		len(h.Args) != 8 || string(h.Args[0]) != `"<string>"` || string(h.Args[7]) != "18446744073709551000" {
		t.Errorf("JSON line %+v", h)
	}
	var s string
	if err := json.Unmarshal(h.Args[1], &s); err != nil || s != "quote\" tab\t \ufffd" {
		t.Errorf("string argument %s: %q %v", h.Args[1], s, err)
	}
	if string(hits[1].Args[2]) != "null" || hits[0].Address != loop {
		t.Errorf("JSON lines %+v", hits[:2])
	}
}

// --time starts a text line with the hit's wall-clock time and command
// name.
func TestTraceOutputTime(t *testing.T) {
	var out bytes.Buffer
	tr, recs := outputCase(t, false, &out)
	tr.cfg.Time = true
	var ev record.Event
	for _, r := range recs[:1] {
		if err := tr.handle(r, &ev); err != nil {
			t.Fatal(err)
		}
	}
	tr.out.flush()
	at := time.Unix(1_700_000_005, 123).Format("15:04:05.000000000")
	want := fmt.Sprintf("%s sample 4242/4243 sample:loop @%#x [999999 1000000 -999999 999999]\n", at, tr.sites[0].Location.Address)
	if out.String() != want {
		t.Errorf("text:\n%s\nwant:\n%s", out.String(), want)
	}
}

// The output path allocates nothing per hit, text or JSON.
func TestTraceOutputNoAlloc(t *testing.T) {
	for _, asJSON := range []bool{false, true} {
		tr, recs := outputCase(t, asJSON, io.Discard)
		tr.cfg.Time = true // text lines with the time
		var ev record.Event
		i := 0
		n := testing.AllocsPerRun(10000, func() {
			if err := tr.handle(recs[i%len(recs)], &ev); err != nil {
				t.Fatal(err)
			}
			i++
		})
		if n != 0 {
			t.Errorf("json %v: %v allocations per hit", asJSON, n)
		}
	}
}

// BenchmarkTraceOutput measures the output path per hit: decoding a
// record, formatting its line, writing it out by the chunk (to
// io.Discard: the cost of the pipe is the reader's, not the tracer's).
func BenchmarkTraceOutput(b *testing.B) {
	for _, c := range []struct {
		name   string
		asJSON bool
		recs   []int // which records of outputCase
	}{
		{"text/4args", false, []int{0}},
		{"json/4args", true, []int{0}},
		{"text/mixed", false, []int{0, 1, 2}},
		{"json/mixed", true, []int{0, 1, 2}},
	} {
		b.Run(c.name, func(b *testing.B) {
			tr, all := outputCase(b, c.asJSON, io.Discard)
			var recs [][]byte
			for _, i := range c.recs {
				recs = append(recs, all[i])
			}
			var ev record.Event
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if err := tr.handle(recs[i%len(recs)], &ev); err != nil {
					b.Fatal(err)
				}
				i++
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// A record whose kind is not its site's (a stale or foreign cookie) is an
// error, not a line.
func TestTraceOutputKindMismatch(t *testing.T) {
	tr, _ := outputCase(t, false, io.Discard)
	e := record.Event{Kind: record.KindUretprobe, Cookie: 3, NArgs: 1}
	rec, err := e.AppendBinary(nil)
	if err != nil {
		t.Fatal(err)
	}
	var ev record.Event
	if err := tr.handle(rec, &ev); err == nil || !strings.Contains(err.Error(), "kind") {
		t.Errorf("uretprobe record for an uprobe site: %v", err)
	}
}
