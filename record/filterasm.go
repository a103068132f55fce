package record

import (
	"fmt"
	"math"
	"runtime"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"

	"github.com/probekit/probekit/usdt"
)

// USDTFilteredName is the constant that tells trace_usdt its filter was
// compiled into instructions at its entry (compileUSDTFilter).
const USDTFilteredName = "probekit_trace_usdt_filtered"

// ctxSlots is the number of 8-byte slots of a uprobe's context (struct
// pt_regs) that trace_usdt may load by constant offset: usdt.bpf.h's
// __PROBEKIT_USDT_CTX_SLOTS. Elsewhere no filter is compiled.
var ctxSlots = map[string]int{"amd64": 21, "arm64": 34}

// compileUSDTFilter writes the filter of spec (SetFilter) as instructions
// at the entry of trace_usdt, and sets USDTFilteredName so that the
// program's own evaluation of the terms (filter_pass) is left out: a hit
// the filter drops then costs the loads and compares of its terms and
// nothing else, as a filter a compiler wrote for one probe does. It does
// so only when it can decide every term that way: the argument of an
// argument term is at one place at every site (usdt.SetSameArgs; a
// constant decides its term before load), a pid or tid term takes one
// helper call; a string term, or an argument whose place varies, leaves
// the filter to the program. Latency mode evaluates the filter at a
// start only, in the program. It reports whether it compiled the filter.
func compileUSDTFilter(spec *ebpf.CollectionSpec) (bool, error) {
	p := spec.Programs[ProgramName]
	done, ok := spec.Variables[USDTFilteredName]
	if p == nil || !ok || len(p.Instructions) == 0 {
		return false, nil
	}
	var mode, nterms, filtered uint32
	var table [MaxFilterTerms]filterTerm
	for name, dst := range map[string]any{ModeName: &mode, NTermsName: &nterms, TermsName: &table, USDTFilteredName: &filtered} {
		if err := spec.Variables[name].Get(dst); err != nil {
			return false, fmt.Errorf("record: %s: %w", name, err)
		}
	}
	if filtered != 0 || nterms == 0 || nterms > MaxFilterTerms || Mode(mode) == ModeLatency {
		return false, nil
	}
	slots := ctxSlots[runtime.GOARCH]
	if slots == 0 {
		return false, nil
	}
	// Without the table (an error) only pid and tid terms compile.
	places, _ := usdt.SameArgsOf(spec)
	prologue, ok := filterInstructions(table[:nterms], places, slots)
	if !ok {
		return false, nil
	}
	if len(prologue) > 0 {
		p.Instructions = withPrologue(p.Instructions, prologue)
	}
	if err := done.Set(uint32(1)); err != nil {
		return false, fmt.Errorf("record: set %s: %w", USDTFilteredName, err)
	}
	return true, nil
}

// withPrologue returns insns with prologue before them: the first
// instruction's symbol, function and line go to the prologue's first.
// The prologue's jumps get their offsets here, its labels dropped, so
// that the program's instructions hold only the symbols and references
// they had (filterPassLabel is the old first instruction).
func withPrologue(insns, prologue asm.Instructions) asm.Instructions {
	labels := map[string]int64{}
	var raw int64
	for _, ins := range prologue {
		if s := ins.Symbol(); s != "" {
			labels[s] = raw
		}
		raw += int64(ins.Width())
	}
	labels[filterPassLabel] = raw
	out := make(asm.Instructions, 0, len(prologue)+len(insns))
	raw = 0
	for _, ins := range prologue {
		next := raw + int64(ins.Width())
		if to, ok := labels[ins.Reference()]; ok && ins.OpCode.Class().IsJump() {
			ins.Offset = int16(to - next)
			ins = ins.WithReference("")
		}
		out = append(out, ins.WithSymbol(""))
		raw = next
	}
	first := insns[0]
	out[0] = btf.WithFuncMetadata(out[0].WithSymbol(first.Symbol()).WithSource(first.Source()), btf.FuncMetadata(&first))
	out = append(out, btf.WithFuncMetadata(first, nil).WithSymbol(""))
	return append(out, insns[1:]...)
}

// Labels of the compiled filter's jumps.
const (
	filterPassLabel    = "probekit_filter_pass"
	filterDropLabel    = "probekit_filter_drop"
	filterGroupLabel   = "probekit_filter_group_%d"
	filterRestoreLabel = "probekit_filter_restore"
)

// filterInstructions compiles terms (groups joined by ||, each a run of
// terms joined by && up to one with OrAfter) into instructions that
// return 0 from the program for a hit no group holds for, and go on to
// the instruction after them, with the context in r1, otherwise: jumps
// to filterPassLabel, which the caller puts on the program's first
// instruction. places says where each argument is; slots bounds the
// context's offsets. No instruction is unreachable (the verifier refuses
// those): a group decided false before load is left out, one decided
// true ends the filter. It reports false for a term it cannot compile,
// and for a filter that drops every hit (the program's own code would be
// unreachable); nil instructions and true for one that drops none.
func filterInstructions(terms []filterTerm, places map[int]usdt.Place, slots int) (asm.Instructions, bool) {
	// The groups that decide, in order, up to one that always holds.
	var groups [][]filterTerm
	always := false
	for start, i := 0, 0; i < len(terms); i++ {
		if terms[i].OrAfter == 0 && i < len(terms)-1 {
			continue
		}
		g := terms[start : i+1]
		start = i + 1
		body, ok := groupInstructions(g, places, slots, asm.R1, filterDropLabel, "")
		switch {
		case !ok:
			return nil, false
		case len(body) == 1 && body[0].OpCode.JumpOp() == asm.Ja:
			continue // never holds
		case len(body) == 0:
			always = true
		default:
			groups = append(groups, g)
		}
		if always {
			break
		}
	}
	if len(groups) == 0 {
		return nil, always
	}
	// A helper call (pid, tid) clobbers r1-r5: the context waits in r6,
	// which the program's own code sets before it reads it.
	helper := false
	for _, t := range terms {
		if f := FilterField(t.Field); f == FilterPID || f == FilterTID {
			helper = true
		}
	}
	pass, ctx := filterPassLabel, asm.R1
	var out asm.Instructions
	if helper {
		pass, ctx = filterRestoreLabel, asm.R6
		out = append(out, asm.Mov.Reg(asm.R6, asm.R1))
	}
	for k, g := range groups {
		last := k == len(groups)-1
		fail, jumpPass := fmt.Sprintf(filterGroupLabel, k+1), ""
		switch {
		case last && always:
			fail = pass
		case last:
			// Holds: on to pass; else fall through to the drop.
			fail, jumpPass = filterDropLabel, pass
		}
		body, _ := groupInstructions(g, places, slots, ctx, fail, jumpPass)
		if k > 0 {
			body[0] = body[0].WithSymbol(fmt.Sprintf(filterGroupLabel, k))
		}
		out = append(out, body...)
		if jumpPass == "" {
			out = append(out, asm.Ja.Label(pass))
		}
	}
	if !always {
		out = append(out, asm.Mov.Imm(asm.R0, 0).WithSymbol(filterDropLabel), asm.Return())
	}
	if helper {
		out = append(out, asm.Mov.Reg(asm.R1, asm.R6).WithSymbol(pass))
	}
	return out, true
}

// groupInstructions compiles terms joined by &&: each term's value into
// r2 (an argument's register read from the context in ctx) and a jump to fail when it does not hold; with pass set, the last
// term jumps to pass when it holds instead, and the group falls through
// when it does not. A term decided before load (an argument that is a
// constant) takes no instruction, or makes the group one jump to fail.
func groupInstructions(terms []filterTerm, places map[int]usdt.Place, slots int, ctx asm.Register, fail, pass string) (asm.Instructions, bool) {
	var out asm.Instructions
	var live []filterTerm
	for _, t := range terms {
		if FilterOp(t.Op) > FilterGE {
			return nil, false
		}
		if FilterField(t.Field) != FilterArg {
			live = append(live, t)
			continue
		}
		p, ok := places[int(t.Val)]
		if !ok || p.Size < 1 || p.Size > 8 || p.Size&(p.Size-1) != 0 {
			return nil, false
		}
		if !p.Const {
			if p.RegOff < 0 || p.RegOff%8 != 0 || p.RegOff/8 >= slots {
				return nil, false
			}
			live = append(live, t)
		} else if !holds(p.Value, FilterOp(t.Op), t.Num) {
			return asm.Instructions{asm.Ja.Label(fail)}, true
		}
	}
	for i, t := range live {
		switch FilterField(t.Field) {
		case FilterArg:
			p := places[int(t.Val)]
			out = append(out, asm.LoadMem(asm.R2, ctx, int16(p.RegOff), asm.DWord))
			if shift := int32(64 - 8*p.Size); shift > 0 {
				out = append(out, asm.LSh.Imm(asm.R2, shift))
				if p.Signed {
					out = append(out, asm.ArSh.Imm(asm.R2, shift))
				} else {
					out = append(out, asm.RSh.Imm(asm.R2, shift))
				}
			}
		case FilterPID:
			out = append(out, asm.FnGetCurrentPidTgid.Call(), asm.Mov.Reg(asm.R2, asm.R0), asm.RSh.Imm(asm.R2, 32))
		case FilterTID:
			out = append(out, asm.FnGetCurrentPidTgid.Call(), asm.Mov.Reg32(asm.R2, asm.R0))
		default:
			return nil, false
		}
		if pass != "" && i == len(live)-1 {
			out = append(out, termJump(FilterOp(t.Op), true, t.Num, pass)...)
		} else {
			out = append(out, termJump(FilterOp(t.Op), false, t.Num, fail)...)
		}
	}
	return out, true
}

// termJump jumps to label when r2 op num holds (when), or when it does
// not; signed.
func termJump(op FilterOp, when bool, num int64, label string) asm.Instructions {
	ops := map[FilterOp][2]asm.JumpOp{
		FilterEQ: {asm.JNE, asm.JEq}, FilterNE: {asm.JEq, asm.JNE},
		FilterLT: {asm.JSGE, asm.JSLT}, FilterLE: {asm.JSGT, asm.JSLE},
		FilterGT: {asm.JSLE, asm.JSGT}, FilterGE: {asm.JSLT, asm.JSGE},
	}[op]
	j := ops[0]
	if when {
		j = ops[1]
	}
	if num >= math.MinInt32 && num <= math.MaxInt32 {
		// A 64-bit jump's immediate is sign-extended.
		return asm.Instructions{j.Imm(asm.R2, int32(num), label)}
	}
	return asm.Instructions{asm.LoadImm(asm.R3, num, asm.DWord), j.Reg(asm.R2, asm.R3, label)}
}

// holds is filter_cmp of trace.c: whether v op num holds, signed.
func holds(v int64, op FilterOp, num int64) bool {
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
