package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/probekit/probekit/internal/test/testkit"
)

// paramsHit is a JSON line of a function probe whose DWARF named its
// values.
type paramsHit struct {
	Kind     string            `json:"kind"`
	Function string            `json:"function"`
	Args     []json.RawMessage `json:"args"`
	Ret      json.RawMessage   `json:"ret"`
	Params   []struct {
		Name       string          `json:"name"`
		Type       string          `json:"type"`
		Value      json.RawMessage `json:"value"`
		Enumerator string          `json:"enumerator"`
	} `json:"params"`
	Return *struct {
		Type  string          `json:"type"`
		Value json.RawMessage `json:"value"`
	} `json:"return"`
}

// params writes a hit's named values as "TYPE NAME=VALUE, ..." (the
// value as its JSON text, an enumerator's name after it in parentheses),
// or a return as "-> TYPE=VALUE".
func (h paramsHit) params() string {
	if h.Return != nil {
		return fmt.Sprintf("-> %s=%s", h.Return.Type, h.Return.Value)
	}
	var parts []string
	for _, p := range h.Params {
		part := fmt.Sprintf("%s %s=%s", p.Type, p.Name, p.Value)
		if p.Enumerator != "" {
			part += "(" + p.Enumerator + ")"
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, ", ")
}

func traceParamsJSON(t *testing.T, args ...string) []paramsHit {
	t.Helper()
	r := runTraceCmd(append([]string{"--json"}, args...)...)
	if r.code != 0 {
		t.Fatalf("probekit trace %v: exit %d: %s", args, r.code, r.errOut)
	}
	var hits []paramsHit
	for _, line := range strings.Split(strings.TrimSpace(r.out), "\n") {
		var h paramsHit
		if err := json.Unmarshal([]byte(line), &h); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		if followNotice(h.Kind) {
			continue
		}
		hits = append(hits, h)
	}
	return hits
}

func paramsFixture(name string) string {
	return filepath.Join(testkit.Root(), "testdata", "params", "bin", name)
}

// hexArg is raw register i of a hit as the "0x..." a pointer prints as.
func hexArg(t *testing.T, h paramsHit, i int) string {
	t.Helper()
	v, err := strconv.ParseInt(string(h.Args[i]), 10, 64)
	if err != nil {
		t.Fatalf("args[%d] %s: %v", i, h.Args[i], err)
	}
	return strconv.Quote(fmt.Sprintf("%#x", uint64(v)))
}

// The C fixture's parameters by name and type, exact, at each function's
// entry, from its DWARF: built -O2 (DWARF 5 location lists), -O2 with
// DWARF 4 (.debug_loc), -O0 (locations in the callee's frame: the
// System V convention gives the entry's), stripped with its debug
// file found by .gnu_debuglink, and through dwz -m (params_dwz,
// params_dwz5: names and types in a common file found by
// .gnu_debugaltlink or .debug_sup). params calls, per round r,
// emit(r, "x"), mix(r, -5e9, 4e9u, &pt, "probekit-params", &pt),
// byval(pt {3, -4}, big, 2.5, "buffer"), label(r), shapes(...).
// Pointers are the registers the program sent, in hex; a struct
// pointer's is the same as the void pointer's (both &pt); the struct by
// value in rdi prints by its members; a struct in memory and a double in
// xmm0 are named, not shown (null).
func TestTraceParamsC(t *testing.T) {
	testkit.RequireKernel(t)
	requireAMD64(t)
	for _, name := range []string{"params_O2", "params_v4", "params_O0", "params_stripped", "params_dwz", "params_dwz5"} {
		t.Run(name, func(t *testing.T) {
			fx := paramsFixture(name)
			var args []string
			for _, fn := range []string{"emit", "mix", "byval", "label", "shapes"} {
				args = append(args, "uprobe:"+fx+":"+fn)
			}
			args = append(args, "uretprobe:"+fx+":label", "uretprobe:"+fx+":emit", "--", fx, "2")
			hits := traceParamsJSON(t, args...)
			if len(hits) != 14 {
				t.Fatalf("%d hits, want 14: %+v", len(hits), hits)
			}
			for r := range 2 {
				h := hits[7*r : 7*r+7]
				want := []string{
					fmt.Sprintf(`int i=%d, const char * name="x"`, r),
					fmt.Sprintf(`-> int=%d`, r+1),
					fmt.Sprintf(`int i=%d, long l=-5000000000, unsigned int u=4000000000, void * p=%s, const char * s="probekit-params", struct point * pt=%[2]s`, r, hexArg(t, h[2], 3)),
					`struct point pt={"x":3,"y":-4}, struct big b=null, double d=null, char * buf="buffer"`,
					fmt.Sprintf(`unsigned long r=%d`, r),
					fmt.Sprintf(`-> const char *=%q`, []string{"even", "odd"}[r]),
					fmt.Sprintf(`int (*)(int) fn=%s, char *const * argv=%s, int (*)[4] grid=%s, unsigned char c=200, enum color col=1(GREEN), `+
						`union word * w=%s, ulong_t n=null, const volatile short * vs=null, _Bool ok=null, float f=null`,
						hexArg(t, h[6], 0), hexArg(t, h[6], 1), hexArg(t, h[6], 2), hexArg(t, h[6], 5)),
				}
				for i, w := range want {
					if got := h[i].params(); got != w {
						t.Errorf("round %d hit %d (%s %s):\n got %s\nwant %s", r, i, h[i].Kind, h[i].Function, got, w)
					}
				}
				// The raw registers stay beside them: no strings without --str.
				if string(h[0].Args[0]) != strconv.Itoa(r) || h[0].Args[1][0] == '"' {
					t.Errorf("round %d: emit's raw args %s", r, h[0].Args)
				}
			}
		})
	}
}

// The text line: FUNC(NAME=VALUE, ...), a struct pointer with its type,
// a typed return value.
func TestTraceParamsText(t *testing.T) {
	testkit.RequireKernel(t)
	requireAMD64(t)
	fx := paramsFixture("params_O2")
	r := runTraceCmd("uprobe:"+fx+":emit", "uprobe:"+fx+":mix", "uretprobe:"+fx+":label", "uprobe:"+fx+":byval", "uprobe:"+fx+":shapes", "--", fx, "1")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.errOut)
	}
	lines := strings.Split(strings.TrimSpace(r.out), "\n")
	if len(lines) != 5 {
		t.Fatalf("%d lines, want 5:\n%s", len(lines), r.out)
	}
	at := func(fn string) uint64 { return funcAddress(t, fx, fn) }
	for i, want := range []string{
		fmt.Sprintf(` uprobe:emit @%#x emit(i=0, name="x")`, at("emit")),
		fmt.Sprintf(` uprobe:mix @%#x mix(i=0, l=-5000000000, u=4000000000, p=0x`, at("mix")),
		fmt.Sprintf(` uprobe:byval @%#x byval(pt={x=3, y=-4}, b=<struct big, not shown>, d=<double, not shown>, buf="buffer")`, at("byval")),
		fmt.Sprintf(` uretprobe:label @%#x = "even"`, at("label")),
		", c=200, col=GREEN, w=(union word *)0x",
	} {
		if !strings.Contains(lines[i], want) {
			t.Errorf("line %d %q, want it to hold %q", i, lines[i], want)
		}
	}
	if !strings.Contains(lines[1], `, s="probekit-params", pt=(struct point *)0x`) {
		t.Errorf("mix line %q: no string or typed struct pointer", lines[1])
	}
}

// A C++ method: this first (its type Counter *const), then the declared
// parameters, one register later than in a function.
func TestTraceParamsCPlusPlus(t *testing.T) {
	testkit.RequireKernel(t)
	requireAMD64(t)
	fx := paramsFixture("params_cc")
	fn := "_ZN7Counter3addEiPKc"
	hits := traceParamsJSON(t, "uprobe:"+fx+":"+fn, "uretprobe:"+fx+":"+fn, "--", fx, "2")
	if len(hits) != 4 {
		t.Fatalf("%d hits, want 4: %+v", len(hits), hits)
	}
	for r := range 2 {
		h := hits[2*r : 2*r+2]
		if got, want := h[0].params(), fmt.Sprintf(`Counter *const this=%s, int v=%d, const char * tag="tag"`, hexArg(t, h[0], 0), r); got != want {
			t.Errorf("round %d:\n got %s\nwant %s", r, got, want)
		}
		if got, want := h[1].params(), fmt.Sprintf("-> long=%d", 100+r); got != want {
			t.Errorf("round %d return %s, want %s", r, got, want)
		}
	}
}

// A Go function built with DWARF: its parameters in Go's register ABI as
// its location lists say (the string in rbx and rcx, read up to its
// length), its result at each return instruction.
func TestTraceParamsGo(t *testing.T) {
	testkit.RequireKernel(t)
	requireAMD64(t)
	fx := paramsFixture("goparams")
	hits := traceParamsJSON(t, "uprobe:"+fx+":main.emit", "uretprobe:"+fx+":main.emit", "uretprobe:"+fx+":main.greet", "--", fx, "3")
	if len(hits) != 9 {
		t.Fatalf("%d hits, want 9: %+v", len(hits), hits)
	}
	for r := range 3 {
		h := hits[3*r : 3*r+3]
		if got, want := h[0].params(), fmt.Sprintf(`int i=%d, string name="gopher", *main.point p=%s, uint8 u=7, bool ok=true`, r, hexArg(t, h[0], 3)); got != want {
			t.Errorf("round %d:\n got %s\nwant %s", r, got, want)
		}
		if got, want := h[1].params(), fmt.Sprintf("-> int=%d", r+6); got != want {
			t.Errorf("round %d return %s, want %s", r, got, want)
		}
		// A string result: its pointer in rax, its length in rbx.
		if got, want := h[2].params(), fmt.Sprintf("-> string=%q", []string{"hello", "bye"}[r%2]); got != want || len(h[2].Ret) == 0 || h[2].Ret[0] == '[' {
			t.Errorf("round %d greet's return %s (ret %s), want %s", r, got, h[2].Ret, want)
		}
	}
}

// libc, stripped, with libc6-dbg's debug file found by build ID: the
// static _int_malloc's parameters by name and type, the sizes func_args
// mallocs exact in bytes.
func TestTraceParamsLibc(t *testing.T) {
	testkit.RequireKernel(t)
	requireAMD64(t)
	testkit.LibcDebugFile(t)
	fx := testkit.Fixture("func_args")
	hits := traceParamsJSON(t, append(launchedLibrary(t), "uprobe:libc.so.6:_int_malloc", "--", fx, "3")...)
	var sizes []string
	for _, h := range hits {
		if len(h.Params) != 2 || h.Params[0].Name != "av" || h.Params[0].Type != "mstate" || h.Params[1].Name != "bytes" || h.Params[1].Type != "size_t" {
			t.Fatalf("hit %+v", h)
		}
		if v := string(h.Params[1].Value); v >= "4242" && v <= "4244" && len(v) == 4 {
			sizes = append(sizes, v)
		}
		if string(h.Params[1].Value) != string(h.Args[1]) {
			t.Errorf("bytes=%s, but rsi=%s", h.Params[1].Value, h.Args[1])
		}
	}
	if strings.Join(sizes, " ") != "4242 4243 4244" {
		t.Errorf("_int_malloc sizes %v, want 4242 4243 4244 (%d hits)", sizes, len(hits))
	}
}
