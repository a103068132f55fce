package record

import (
	"fmt"
	"os/exec"
	"runtime"
	"strconv"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"github.com/probekit/probekit/internal/features"
	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/usdt"
)

// oracleHolds evaluates terms on a hit's values as the filter's
// documentation says (groups up to OrAfter joined by ||, terms joined by
// &&), apart from the program.
func oracleHolds(terms []FilterTerm, args []int64, pid int64) bool {
	group := true
	for i, t := range terms {
		var v int64
		switch t.Field {
		case FilterArg:
			v = args[t.Val]
		case FilterPID, FilterTID:
			v = pid // the fixture's only thread
		}
		group = group && oracleCmp(v, t.Op, t.Num)
		if t.OrAfter || i == len(terms)-1 {
			if group {
				return true
			}
			group = true
		}
	}
	return false
}

// oracleCmp is whether v op num holds, signed, apart from the code under
// test (holds).
func oracleCmp(v int64, op FilterOp, num int64) bool {
	switch op {
	case FilterEQ:
		return v == num
	case FilterNE:
		return v != num
	case FilterLT:
		return v < num
	case FilterLE:
		return v <= num
	case FilterGT:
		return v > num
	case FilterGE:
		return v >= num
	}
	return false
}

// countFiltered loads the trace program counting hits of the fixture's
// sample:probe that terms keep, with the arguments' places compiled in
// (same) or not, fires the probe rounds times and returns the count and
// the hits the fixture reported. compiled says whether the load wrote
// the filter as instructions.
func countFiltered(t *testing.T, p *testkit.Process, fx, probe string, terms []FilterTerm, same bool, rounds int) (count uint64, hits []testkit.Hit, compiled bool) {
	t.Helper()
	counts, hits, compiled := countHits(t, p, fx, probe, terms, same, rounds, 1, nil)
	return counts[0], hits, compiled
}

// countHits is countFiltered with the counts of probe indexes 0 to n-1,
// after setup has changed the spec.
func countHits(t *testing.T, p *testkit.Process, fx, probe string, terms []FilterTerm, same bool, rounds, n int, setup func(*ebpf.CollectionSpec) error) (counts []uint64, hits []testkit.Hit, compiled bool) {
	t.Helper()
	spec, err := Spec()
	if err != nil {
		t.Fatal(err)
	}
	if err := usdt.Prepare(spec); err != nil {
		t.Fatal(err)
	}
	if err := SetMode(spec, ModeCount, 0); err != nil {
		t.Fatal(err)
	}
	if err := SetFilter(spec, terms); err != nil {
		t.Fatal(err)
	}
	if setup != nil {
		if err := setup(spec); err != nil {
			t.Fatal(err)
		}
	}
	if same {
		refs := []usdt.ProbeRef{{Target: fx, Provider: "sample", Name: probe}}
		if _, _, err := usdt.SetSameArgs(spec, refs, &usdt.Options{PID: p.PID()}); err != nil {
			t.Fatal(err)
		}
	}
	if compiled, err = compileUSDTFilter(spec.Copy()); err != nil {
		t.Fatal(err)
	}
	objs, err := LoadSpec(spec, USDTProgram)
	if err != nil {
		t.Fatal(err)
	}
	defer objs.Close()
	att, err := usdt.NewAttacherWithMaps(spec, objs.Specs, objs.IPToSpecID)
	if err != nil {
		t.Fatal(err)
	}
	l, err := att.Attach(objs.Program, fx, "sample", probe, &usdt.Options{PID: p.PID()})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	hits = p.Fire(probe, rounds)
	if counts, err = objs.Counts(n); err != nil {
		t.Fatal(err)
	}
	return counts, hits, compiled
}

// With SetUSDTProbe a counted hit is of the index it names, not of its
// site's cookie (0 here); so are the hits a compiled filter keeps.
func TestKernelUSDTProbe(t *testing.T) {
	testkit.RequireKernel(t)
	fx := testkit.Fixture("usdt_sample")
	p := testkit.Start(t, fx)
	set := func(spec *ebpf.CollectionSpec) error { return SetUSDTProbe(spec, 3) }
	counts, _, _ := countHits(t, p, fx, "loop", nil, false, 7, 4, set)
	if want := []uint64{0, 0, 0, 7}; fmt.Sprint(counts) != fmt.Sprint(want) {
		t.Errorf("counts %v, want %v", counts, want)
	}
	counts, _, _ = countHits(t, p, fx, "loop", []FilterTerm{{Field: FilterArg, Op: FilterGE, Val: 0, Num: 2}}, true, 7, 4, set)
	if want := []uint64{0, 0, 0, 5}; fmt.Sprint(counts) != fmt.Sprint(want) {
		t.Errorf("filtered: counts %v, want %v", counts, want)
	}
	if err := SetUSDTProbe(&ebpf.CollectionSpec{}, MaxCounted); err == nil {
		t.Error("index MaxCounted accepted")
	}
}

// TestKernelCompiledFilter counts, on the fixture's probes, the hits that
// filters keep, with the filter written as instructions at the program's
// entry (the arguments' places known, compileUSDTFilter) and evaluated
// by the program's own code (not known), and checks both against the
// filter evaluated on the values the fixture passed. sample:sizes has
// signed and unsigned arguments of 1 to 8 bytes in registers, varying
// with the round; sample:consts has constants only.
func TestKernelCompiledFilter(t *testing.T) {
	testkit.RequireKernel(t)
	if _, ok := ctxSlots[runtime.GOARCH]; !ok {
		t.Skip("no compiled filter on this architecture")
	}
	fx := testkit.Fixture("usdt_sample")
	p := testkit.Start(t, fx)
	pid := int64(p.PID())
	arg := func(n int, op FilterOp, num int64) FilterTerm {
		return FilterTerm{Field: FilterArg, Op: op, Val: n, Num: num}
	}
	or := func(t FilterTerm) FilterTerm { t.OrAfter = true; return t }
	const rounds = 10
	type filterCase struct {
		probe    string
		terms    []FilterTerm
		compiled bool
	}
	var cases []filterCase
	// Each operator at a value some round has (u1 253 at round 3, s4
	// -123459 at round 3), as the last term (the jump to pass) and
	// before another (the jump to fail).
	for op := FilterEQ; op <= FilterGE; op++ {
		always := arg(3, FilterGE, 0)
		cases = append(cases,
			filterCase{"sizes", []FilterTerm{arg(1, op, 253)}, true},
			filterCase{"sizes", []FilterTerm{arg(1, op, 253), always}, true},
			filterCase{"sizes", []FilterTerm{arg(4, op, -123459), always}, true},
			filterCase{"sizes", []FilterTerm{or(arg(4, op, -123459)), arg(1, FilterEQ, 255)}, true})
	}
	for _, c := range append(cases, []filterCase{
		// s1 = -5 - r as int8: sign extension of one byte.
		{"sizes", []FilterTerm{arg(0, FilterGT, -8)}, true},
		// u1 = 250 + r as uint8 wraps to 0 at round 6.
		{"sizes", []FilterTerm{arg(1, FilterLT, 10)}, true},
		{"sizes", []FilterTerm{arg(2, FilterEQ, -1236)}, true},
		{"sizes", []FilterTerm{arg(3, FilterGE, 60005)}, true},
		{"sizes", []FilterTerm{arg(4, FilterNE, -123460)}, true},
		// Past 32 bits: the constant is a 64-bit load.
		{"sizes", []FilterTerm{arg(5, FilterGT, 4000000007)}, true},
		{"sizes", []FilterTerm{arg(6, FilterLE, -1234567890125)}, true},
		{"sizes", []FilterTerm{arg(7, FilterLT, -610)}, true},
		// Groups: && binds before ||.
		{"sizes", []FilterTerm{arg(0, FilterGT, -7), or(arg(1, FilterLT, 8)), arg(3, FilterNE, 60009)}, true},
		{"sizes", []FilterTerm{arg(1, FilterLT, 8), or(arg(3, FilterNE, 60007)), arg(0, FilterLE, -12), arg(2, FilterLT, 0)}, true},
		// Helper terms keep the context for the argument after them.
		{"sizes", []FilterTerm{{Field: FilterPID, Op: FilterEQ, Num: pid}, arg(1, FilterLT, 10)}, true},
		{"sizes", []FilterTerm{or(FilterTerm{Field: FilterPID, Op: FilterEQ, Num: 1}), {Field: FilterTID, Op: FilterEQ, Num: pid}, arg(6, FilterGT, -1234567890128)}, true},
		// Constants decide before load: a true term takes no instruction,
		// a false one drops its group, one always-true group the rest.
		{"consts", []FilterTerm{arg(0, FilterEQ, 5), arg(2, FilterEQ, -1)}, true},
		{"consts", []FilterTerm{or(arg(1, FilterEQ, -8)), arg(4, FilterEQ, 0x7fffffffffffffff)}, true},
		{"consts", []FilterTerm{or(arg(3, FilterLT, 65535)), {Field: FilterPID, Op: FilterEQ, Num: pid}}, true},
		// Every hit dropped: left to the program (its code after the
		// filter would be unreachable).
		{"consts", []FilterTerm{arg(1, FilterEQ, -8)}, false},
		// A string term is the program's.
		{"sizes", []FilterTerm{arg(0, FilterGT, -8), {Field: FilterComm, Op: FilterEQ, Str: "usdt_sample"}}, false},
	}...) {
		t.Run(fmt.Sprintf("%s/%+v", c.probe, c.terms), func(t *testing.T) {
			got, hits, compiled := countFiltered(t, p, fx, c.probe, c.terms, true, rounds)
			if compiled != c.compiled {
				t.Errorf("compiled %v, want %v", compiled, c.compiled)
			}
			want := uint64(0)
			for _, h := range hits {
				if oracleHolds(c.terms, h.Args, pid) {
					want++
				}
			}
			if got != want {
				t.Errorf("compiled filter counted %d of %d hits, want %d", got, len(hits), want)
			}
			prog, _, compiledNot := countFiltered(t, p, fx, c.probe, c.terms, false, rounds)
			if prog != want {
				t.Errorf("the program's filter counted %d, want %d", prog, want)
			}
			if compiledNot && c.probe == "sizes" && hasArgTerm(c.terms) {
				t.Error("compiled without the arguments' places")
			}
		})
	}
}

func hasArgTerm(terms []FilterTerm) bool {
	for _, t := range terms {
		if t.Field == FilterArg {
			return true
		}
	}
	return false
}

// The instructions of a one-term filter are those of a compiler that
// knows the probe: the load of the register, the extension of its size,
// the comparison that jumps past the drop.
func TestFilterInstructions(t *testing.T) {
	places := map[int]usdt.Place{0: {RegOff: 112, Size: 4, Signed: true}, 1: {Const: true, Value: 7, Size: 8}}
	terms := []filterTerm{{Field: uint8(FilterArg), Op: uint8(FilterGT), Val: 0, OrAfter: 1}}
	insns, ok := filterInstructions(terms, places, 21, false)
	if !ok {
		t.Fatal("not compiled")
	}
	want := asm.Instructions{
		asm.LoadMem(asm.R2, asm.R1, 112, asm.DWord),
		asm.LSh.Imm(asm.R2, 32),
		asm.ArSh.Imm(asm.R2, 32),
		asm.JSGT.Imm(asm.R2, 0, filterPassLabel),
		asm.Ja.Label(filterDropLabel), // by 0: the verifier removes it
		asm.Mov.Imm(asm.R0, 0).WithSymbol(filterDropLabel),
		asm.Return(),
	}
	if fmt.Sprint(insns) != fmt.Sprint(want) {
		t.Errorf("got\n%v\nwant\n%v", insns, want)
	}
	// Refused: an offset past the context, a string, an unknown place.
	for _, c := range []struct {
		places map[int]usdt.Place
		term   filterTerm
	}{
		{map[int]usdt.Place{0: {RegOff: 21 * 8, Size: 8}}, filterTerm{Field: uint8(FilterArg), Op: uint8(FilterEQ)}},
		{map[int]usdt.Place{0: {RegOff: 4, Size: 8}}, filterTerm{Field: uint8(FilterArg), Op: uint8(FilterEQ)}},
		{places, filterTerm{Field: uint8(FilterStr), Op: uint8(FilterEQ)}},
		{places, filterTerm{Field: uint8(FilterArg), Op: uint8(FilterEQ), Val: 2}},
		{places, filterTerm{Field: uint8(FilterArg), Op: uint8(FilterPrefix)}},
	} {
		c.term.OrAfter = 1
		if _, ok := filterInstructions([]filterTerm{c.term}, c.places, 21, false); ok {
			t.Errorf("%+v with %+v compiled", c.term, c.places)
		}
	}
	// Constant-true filter: no instruction at all.
	insns, ok = filterInstructions([]filterTerm{{Field: uint8(FilterArg), Op: uint8(FilterEQ), Val: 1, Num: 7, OrAfter: 1}}, places, 21, false)
	if !ok || len(insns) != 0 {
		t.Errorf("constant-true filter: %v, %v", insns, ok)
	}
}

// TestKernelCompiledFuncFilter counts the hits of func_args's sum6 that
// filters keep, through four function probes whose cookies say where
// the values are: C registers (sum6(r, -2, 300, -40000, 5000000000,
// -6000000000)), the return register (r - 1000039702), Go's (of which
// rcx, rdi, rsi, r8 and r9 hold -40000, r, -2, 5000000000, -6000000000)
// and a kind with no values. Each count is checked against the filter
// evaluated on those values, with the filter compiled
// (compileFuncFilter) and with the program's own.
func TestKernelCompiledFuncFilter(t *testing.T) {
	testkit.RequireKernel(t)
	if runtime.GOARCH != "amd64" {
		t.Skip("the fixture is built for x86-64")
	}
	ok, err := features.Have(features.Cookie)
	testkit.NeedFeature(t, ok, err, features.Cookie.Since(), features.Cookie.String())
	path := testkit.Fixture("func_args")
	const rounds = 6
	// The values of each probe's kind in round r; nil: a value it does
	// not have.
	values := func(probe int, r int64) []*int64 {
		v := func(x int64) *int64 { return &x }
		switch probe {
		case 0:
			return []*int64{v(r), v(-2), v(300), v(-40000), v(5000000000), v(-6000000000)}
		case 1:
			return []*int64{v(r - 1000039702)}
		case 2:
			return []*int64{nil, nil, v(-40000), v(r), v(-2), v(5000000000), v(-6000000000)}
		}
		return nil
	}
	cookie := func(i uint32, regs Regs, kind Kind) uint64 {
		return uint64(i) | uint64(regs)<<funcCookieRegsShift | uint64(kind)<<40
	}
	probes := []funcProbe{
		{"sum6", false, cookie(0, RegsC, KindUprobe)},
		{"sum6", true, cookie(1, RegsRet, KindUretprobe)},
		{"sum6", false, cookie(2, RegsGo, KindUprobe)},
		{"sum6", false, cookie(3, RegsRet+1, KindUprobe)},
	}
	arg := func(n int, op FilterOp, num int64) FilterTerm {
		return FilterTerm{Field: FilterArg, Op: op, Val: n, Num: num}
	}
	or := func(t FilterTerm) FilterTerm { t.OrAfter = true; return t }
	pid := FilterTerm{Field: FilterPID, Op: FilterNE, Num: 0}
	for _, terms := range [][]FilterTerm{
		{arg(0, FilterLT, 3)},
		{arg(0, FilterGE, 2), arg(1, FilterEQ, -2)},
		{arg(3, FilterEQ, 4)},
		{arg(4, FilterGT, 4999999999), arg(3, FilterLE, 1)},
		{or(arg(5, FilterEQ, -6000000000)), arg(0, FilterEQ, -1000039700)},
		{or(arg(6, FilterLT, -5999999999)), arg(2, FilterNE, 300)},
		{or(arg(8, FilterEQ, 0)), pid, arg(0, FilterLE, -1000039699)},
		{pid},
	} {
		t.Run(fmt.Sprintf("%+v", terms), func(t *testing.T) {
			var want [4]uint64
			// Go's rax and rbx at sum6's entry hold what they hold: a
			// term on them leaves the Go probe's count to the two
			// programs agreeing.
			unknown := false
			for i := range probes {
				for r := range int64(rounds) {
					vals := values(i, r)
					ok, group := false, true
					for k, term := range terms {
						var v *int64
						if term.Field == FilterPID {
							v = new(int64) // any pid is not 0
							*v = 1
						} else if term.Val < len(vals) {
							v = vals[term.Val]
							unknown = unknown || i == 2 && v == nil
						}
						group = group && v != nil && oracleCmp(*v, term.Op, term.Num)
						if term.OrAfter || k == len(terms)-1 {
							ok = ok || group
							group = true
						}
					}
					if ok {
						want[i]++
					}
				}
			}
			// With the kind known before load (SetFuncRegs), one probe
			// of that kind: compiled, for C, where every filter here can
			// pass; for the return register the program keeps a filter
			// that drops every hit.
			for i, regs := range []Regs{RegsC, RegsRet} {
				got, was := countFuncHits(t, true, &regs, terms, probes[i:i+1], path, rounds)
				if !was && regs == RegsC || got[i] != want[i] {
					t.Errorf("registers %d known: compiled %v, counts %v, want %d at %d", regs, was, got, want[i], i)
				}
			}
			var counts [2][4]uint64
			for k, compiled := range []bool{true, false} {
				got, was := countFuncHits(t, compiled, nil, terms, probes, path, rounds)
				if was != compiled {
					t.Errorf("compiled %v, want %v", was, compiled)
				}
				if unknown {
					want[2] = got[2]
				}
				if got != want {
					t.Errorf("compiled %v: counts %v, want %v", compiled, got, want)
				}
				counts[k] = got
			}
			if counts[0] != counts[1] {
				t.Errorf("compiled %v, the program's %v", counts[0], counts[1])
			}
		})
	}
}

// countFuncHits counts, with terms, the hits of probes (cookie indexes 0
// to 3) in a run of the fixture at path, with filters compiled or not,
// the kind of every probe's registers known (regs) or not, and reports
// whether the filter was compiled.
func countFuncHits(t *testing.T, compile bool, regs *Regs, terms []FilterTerm, probes []funcProbe, path string, rounds int) ([4]uint64, bool) {
	t.Helper()
	defer func(was bool) { compileFilters = was }(compileFilters)
	compileFilters = compile
	spec, err := Spec()
	if err != nil {
		t.Fatal(err)
	}
	if err := SetMode(spec, ModeCount, 0); err != nil {
		t.Fatal(err)
	}
	if err := SetFilter(spec, terms); err != nil {
		t.Fatal(err)
	}
	if regs != nil {
		if err := SetFuncRegs(spec, *regs); err != nil {
			t.Fatal(err)
		}
	}
	compiled, err := compileFuncFilter(spec.Copy())
	if err != nil {
		t.Fatal(err)
	}
	objs, err := LoadSpec(spec, FuncProgram)
	if err != nil {
		t.Fatal(err)
	}
	defer objs.Close()
	ex, err := link.OpenExecutable(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range probes {
		opts := &link.UprobeOptions{Cookie: p.cookie}
		var l link.Link
		if p.ret {
			l, err = ex.Uretprobe(p.sym, objs.FuncProgram, opts)
		} else {
			l, err = ex.Uprobe(p.sym, objs.FuncProgram, opts)
		}
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
	}
	if out, err := exec.Command(path, strconv.Itoa(rounds)).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", path, err, out)
	}
	counts, err := objs.Counts(4)
	if err != nil {
		t.Fatal(err)
	}
	return [4]uint64(counts), compiled
}
