package tracer

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/probekit/probekit/debuginfo"
	"github.com/probekit/probekit/record"
)

// Values by type, from the registers a hit carries: integers truncated
// to their size (a 32-bit int's register has undefined upper bits, psABI
// §3.2.3) and extended by their sign, strings as read, a Go string cut
// to its length, a struct in registers by its members, and the marks of
// what is not shown; Param.Value the same values as Go values.
func TestParamValues(t *testing.T) {
	ev := &record.Event{NArgs: 6}
	ev.Args = [record.MaxArgs]int64{-0xfffffffb, 0x00000000ffffffff, 0x7ffd1000, 3, 0x7ffd2000, 0x1122334455667788}
	ev.StrArgs = 1<<2 | 1<<4
	ev.Strs[0], ev.Strs[1] = []byte("probekit"), []byte("gopher and more")
	tInt := debuginfo.Type{Name: "int", Kind: debuginfo.KindSigned, Size: 4}
	tUint := debuginfo.Type{Name: "unsigned int", Kind: debuginfo.KindUnsigned, Size: 4}
	tShort := debuginfo.Type{Name: "unsigned short", Kind: debuginfo.KindUnsigned, Size: 2}
	tBool := debuginfo.Type{Name: "_Bool", Kind: debuginfo.KindBool, Size: 1}
	tStr := debuginfo.Type{Name: "const char *", Kind: debuginfo.KindString, Size: 8}
	tGoStr := debuginfo.Type{Name: "string", Kind: debuginfo.KindGoString, Size: 16}
	point := debuginfo.Type{Name: "struct point", Kind: debuginfo.KindStruct, Size: 8}
	pointPtr := debuginfo.Type{Name: "struct point *", Kind: debuginfo.KindPointer, Size: 8, Elem: &point}
	point.Fields = []debuginfo.Field{{Name: "x", Offset: 0, Type: tInt}, {Name: "y", Offset: 4, Type: tInt}}
	tDouble := debuginfo.Type{Name: "double", Kind: debuginfo.KindFloat, Size: 8}
	for _, tc := range []struct {
		p          paramRead
		text, json string
		value      any // Param.Value
	}{
		{paramRead{typ: tInt, avail: true, idx: []int{0}}, "5", "5", int64(5)},
		{paramRead{typ: tInt, avail: true, idx: []int{1}}, "-1", "-1", int64(-1)},
		{paramRead{typ: tUint, avail: true, idx: []int{1}}, "4294967295", "4294967295", uint64(4294967295)},
		{paramRead{typ: tShort, avail: true, idx: []int{5}}, "30600", "30600", uint64(30600)},
		{paramRead{typ: tBool, avail: true, idx: []int{3}}, "true", "true", true},
		{paramRead{typ: tStr, avail: true, idx: []int{2}}, `"probekit"`, `"probekit"`, "probekit"},
		{paramRead{typ: tStr, avail: true, idx: []int{3}}, "0x3", `"0x3"`, uint64(3)}, // not read as a string
		{paramRead{typ: tGoStr, avail: true, idx: []int{4, 3}, sizes: []int64{8, 8}}, `"gop"`, `"gop"`, "gop"},
		{paramRead{typ: pointPtr, avail: true, idx: []int{2}}, "(struct point *)0x7ffd1000", `"0x7ffd1000"`, uint64(0x7ffd1000)},
		{paramRead{typ: point, avail: true, idx: []int{0}, sizes: []int64{0}}, "{x=5, y=-1}", `{"x":5,"y":-1}`, []Param{
			{Name: "x", Type: tInt, Value: int64(5), Text: "5"}, {Name: "y", Type: tInt, Value: int64(-1), Text: "-1"}}},
		{paramRead{typ: tDouble, avail: true, idx: []int{-1}}, "<double, not shown>", "null", nil},
		{paramRead{typ: tInt, avail: false}, "<int, unavailable>", "null", nil},
		{paramRead{typ: tInt, avail: true, idx: []int{7}}, "<int, not shown>", "null", nil}, // past the values sent
	} {
		if got := string(appendValue(nil, ev, &tc.p, false)); got != tc.text {
			t.Errorf("%s text %s, want %s", tc.p.typ.Name, got, tc.text)
		}
		if got := string(appendValue(nil, ev, &tc.p, true)); got != tc.json {
			t.Errorf("%s json %s, want %s", tc.p.typ.Name, got, tc.json)
		}
		if got := paramValue(ev, &tc.p); !reflect.DeepEqual(got, tc.value) {
			t.Errorf("%s value %#v, want %#v", tc.p.typ.Name, got, tc.value)
		}
	}
	// Hit.Params: nil for a site without DWARF names; a string value is
	// a copy (the event's bytes are reused).
	site := &Site{Kind: record.KindUprobe}
	if ps := (&Hit{Event: ev, Site: site}).Params(); ps != nil {
		t.Errorf("a site without DWARF: %+v", ps)
	}
	site.params = &siteParams{params: []paramRead{{name: "i", typ: tInt, avail: true, idx: []int{0}}, {name: "s", typ: tStr, avail: true, idx: []int{2}}}}
	ps := (&Hit{Event: ev, Site: site}).Params()
	want := []Param{{Name: "i", Type: tInt, Value: int64(5), Text: "5"}, {Name: "s", Type: tStr, Value: "probekit", Text: `"probekit"`}}
	if !reflect.DeepEqual(ps, want) {
		t.Errorf("Params %+v, want %+v", ps, want)
	}
	ev.Strs[0][0] = 'X'
	if ps[1].Value != "probekit" {
		t.Errorf("the string shares the event's bytes: %q", ps[1].Value)
	}
	ev.Strs[0][0] = 'p'
	// A string read with an error bit prints as unreadable, never as
	// the pointer; a NULL one as the pointer it is.
	ev.Errors = 1 << 2
	pr := &paramRead{typ: tStr, avail: true, idx: []int{2}}
	if got := string(appendValue(nil, ev, pr, false)); got != "<unreadable: not resident>" {
		t.Errorf("unreadable string: %s", got)
	}
	if got := string(appendValue(nil, ev, pr, true)); got != `{"unreadable":"not resident","address":"0x7ffd1000"}` {
		t.Errorf("unreadable string, JSON: %s", got)
	}
	if got, want := paramValue(ev, pr), (Unreadable{Address: 0x7ffd1000, Reason: NotResident}); got != want {
		t.Errorf("unreadable string's value %#v, want %#v", got, want)
	}
	ev.Args[2] = 0
	if got := string(appendValue(nil, ev, pr, false)); got != "0x0" {
		t.Errorf("NULL string: %s", got)
	}
}

// Text output quotes what the traced program passed and escapes its
// control bytes (C1's too) and invalid UTF-8; JSON stays JSON, as
// encoding/json writes it (invalid UTF-8 as U+FFFD, C1 raw).
func TestStrEscaped(t *testing.T) {
	ev := &record.Event{NArgs: 1, StrArgs: 1}
	ev.Args[0] = 0x1000
	ev.Strs[0] = []byte("a\x1b[2Jb\xff\"c\\\n\u009b")
	tStr := debuginfo.Type{Name: "const char *", Kind: debuginfo.KindString, Size: 8}
	pr := &paramRead{typ: tStr, avail: true, idx: []int{0}}
	if got, want := string(appendValue(nil, ev, pr, false)), `"a\x1b[2Jb\xff\"c\\\n\u009b"`; got != want {
		t.Errorf("text %s, want %s", got, want)
	}
	js := appendValue(nil, ev, pr, true)
	if got, want := string(js), "\"a\\u001b[2Jb\\ufffd\\\"c\\\\\\n\u009b\""; got != want {
		t.Errorf("JSON %s, want %s", got, want)
	}
	var s string
	if err := json.Unmarshal(js, &s); err != nil || s != "a\x1b[2Jb\ufffd\"c\\\n\u009b" {
		t.Errorf("JSON %s reads back as %q, %v", js, s, err)
	}
	if got, want := string(appendArg(nil, ev, 0, nil, false)), `"a\x1b[2Jb\xff\"c\\\n\u009b"`; got != want {
		t.Errorf("raw value %s, want %s", got, want)
	}
	// A raw value (USDT, --str) whose string read failed: the mark, not
	// the pointer; one whose operand could not be read: null.
	ev.Errors = 1
	if got, want := string(appendArg(nil, ev, 0, nil, false)), "<unreadable: not resident>"; got != want {
		t.Errorf("unreadable raw value %s, want %s", got, want)
	}
	if got, want := string(appendArg(nil, ev, 0, nil, true)), `{"unreadable":"not resident","address":"0x1000"}`; got != want {
		t.Errorf("unreadable raw value, JSON %s, want %s", got, want)
	}
	ev.Args[0] = 0
	if got := string(appendArg(nil, ev, 0, nil, false)); got != "null" {
		t.Errorf("unread operand %s, want null", got)
	}
}
