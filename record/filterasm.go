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

// compileFilters is whether LoadSpecOptions compiles filters into
// instructions; tests turn it off to compare with the programs' own.
var compileFilters = true

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
	p, terms, done, err := filterToCompile(spec, ProgramName, USDTFilteredName)
	if p == nil || err != nil {
		return false, err
	}
	// Without the table (an error) only pid and tid terms compile.
	places, _ := usdt.SameArgsOf(spec)
	prologue, ok := filterInstructions(terms, places, ctxSlots[runtime.GOARCH], false)
	return installFilter(p, done, prologue, ok)
}

// installFilter puts a compiled filter (ok: one was compiled) before p's
// instructions and sets done, the constant that leaves out p's own
// evaluation of the terms. It reports whether it did.
func installFilter(p *ebpf.ProgramSpec, done *ebpf.VariableSpec, prologue asm.Instructions, ok bool) (bool, error) {
	if !ok {
		return false, nil
	}
	if len(prologue) > 0 {
		p.Instructions = withPrologue(p.Instructions, prologue)
	}
	if err := done.Set(uint32(1)); err != nil {
		return false, fmt.Errorf("record: set %s: %w", done.Name, err)
	}
	return true, nil
}

// filterToCompile returns the program prog of spec and its filter's
// terms when there is a filter to compile into it: terms set, not
// compiled yet (the constant doneName), not latency mode, on an
// architecture with a known context. Otherwise the program is nil.
func filterToCompile(spec *ebpf.CollectionSpec, prog, doneName string) (*ebpf.ProgramSpec, []filterTerm, *ebpf.VariableSpec, error) {
	p := spec.Programs[prog]
	done, ok := spec.Variables[doneName]
	if !compileFilters || p == nil || !ok || len(p.Instructions) == 0 || ctxSlots[runtime.GOARCH] == 0 {
		return nil, nil, nil, nil
	}
	var mode, nterms, filtered uint32
	var table [MaxFilterTerms]filterTerm
	for name, dst := range map[string]any{ModeName: &mode, NTermsName: &nterms, TermsName: &table, doneName: &filtered} {
		if err := spec.Variables[name].Get(dst); err != nil {
			return nil, nil, nil, fmt.Errorf("record: %s: %w", name, err)
		}
	}
	if filtered != 0 || nterms == 0 || nterms > MaxFilterTerms || Mode(mode) == ModeLatency {
		return nil, nil, nil, nil
	}
	return p, table[:nterms], done, nil
}

// FuncFilteredName is the constant that tells trace_func its filter was
// compiled into instructions at its entry (compileFuncFilter).
const FuncFilteredName = "probekit_trace_func_filtered"

// funcRegOffsets are where a function probe's values are, by the Regs of
// its cookie: the offsets in the context of trace.c's FUNC_C_REGS,
// FUNC_GO_REGS and FUNC_RET_REG, by architecture.
var funcRegOffsets = map[string][RegsRet + 1][]int{
	// struct pt_regs: r15, r14, r13, r12, bp, bx, r11, r10, r9, r8, ax,
	// cx, dx, si, di.
	"amd64": {
		RegsC:   {112, 104, 96, 88, 72, 64},             // di, si, dx, cx, r8, r9
		RegsGo:  {80, 40, 88, 112, 104, 72, 64, 56, 48}, // ax, bx, cx, di, si, r8-r11
		RegsRet: {80},                                   // ax
	},
	// struct user_pt_regs: x0 to x30 first.
	"arm64": {
		RegsC:   {0, 8, 16, 24, 32, 40, 48, 56},
		RegsGo:  {0, 8, 16, 24, 32, 40, 48, 56},
		RegsRet: {0},
	},
}

// compileFuncFilter writes the filter of spec as instructions at the
// entry of trace_func, as compileUSDTFilter does for trace_usdt. A
// function probe's values depend on its site's cookie (FuncCookie's
// Regs), so the instructions read the cookie (bpf_get_attach_cookie),
// drop a hit without one, as the program does, and evaluate the terms
// on the registers of the cookie's kind, each kind in its own block; a
// value the kind does not have fails its term, as in the program. That
// needs BPF cookies (without them a site's cookie is in func_ips). Where
// SetFuncRegs gave the one kind of every site, the terms are evaluated on
// its registers with no cookie read, with or without BPF cookies. Only
// terms on numbers, the pid or the tid compile.
func compileFuncFilter(spec *ebpf.CollectionSpec) (bool, error) {
	p, terms, done, err := filterToCompile(spec, FuncProgramName, FuncFilteredName)
	if p == nil || err != nil {
		return false, err
	}
	offs := funcRegOffsets[runtime.GOARCH]
	var regs uint32
	if err := spec.Variables[FuncRegsName].Get(&regs); err != nil {
		return false, fmt.Errorf("record: %s: %w", FuncRegsName, err)
	}
	var prologue asm.Instructions
	var cookies, ok bool
	if v, has := spec.Variables[CookieFlagName]; has {
		cookies = v.Get(&cookies) == nil && cookies
	}
	switch {
	case regs > 0 && int(regs) <= len(offs):
		// Every site's kind is known (SetFuncRegs): no cookie to read.
		prologue, ok = filterInstructions(terms, funcPlaces(offs[regs-1]), ctxSlots[runtime.GOARCH], true)
	case cookies:
		prologue, ok = funcFilterInstructions(terms, offs, ctxSlots[runtime.GOARCH])
	}
	return installFilter(p, done, prologue, ok)
}

// funcPlaces are the places of a function probe's values, at offs in the
// context: whole registers, signed.
func funcPlaces(offs []int) map[int]usdt.Place {
	places := make(map[int]usdt.Place, len(offs))
	for n, off := range offs {
		places[n] = usdt.Place{RegOff: off, Size: 8, Signed: true}
	}
	return places
}

// FuncRegsName is the constant SetFuncRegs sets.
const FuncRegsName = "probekit_trace_func_regs"

// SetFuncRegs tells the loader of spec that every site trace_func will
// be attached to has a cookie (FuncCookie) of regs: a filter is then
// compiled into instructions that read those registers, with no cookie
// to read first, and on kernels without BPF cookies too. The caller
// attaches only such sites.
func SetFuncRegs(spec *ebpf.CollectionSpec, regs Regs) error {
	if regs > RegsRet {
		return fmt.Errorf("record: registers %d", regs)
	}
	if err := spec.Variables[FuncRegsName].Set(uint32(regs) + 1); err != nil {
		return fmt.Errorf("set %s: %w", FuncRegsName, err)
	}
	return nil
}

// funcFilterInstructions is compileFuncFilter's prologue: the cookie, a
// dispatch on its Regs, a block of terms for each kind (offs) and one for
// any other (no value at all), the drop, and the context back in r1.
func funcFilterInstructions(terms []filterTerm, offs [RegsRet + 1][]int, slots int) (asm.Instructions, bool) {
	const pass = filterRestoreLabel
	block := func(k int) string { return fmt.Sprintf("probekit_filter_regs_%d", k) }
	out := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.FnGetAttachCookie.Call(),
		asm.JEq.Imm(asm.R0, 0, filterDropLabel),
		asm.Mov.Reg(asm.R2, asm.R0),
		asm.RSh.Imm(asm.R2, funcCookieRegsShift),
		asm.And.Imm(asm.R2, 0xff),
	}
	for k := range offs {
		out = append(out, asm.JEq.Imm(asm.R2, int32(k), block(k)))
	}
	kinds := append([][]int{nil}, offs[:]...)
	for i, regs := range kinds {
		places := funcPlaces(regs)
		prefix := fmt.Sprintf("probekit_filter_%d_", i)
		body, ok := filterBlock(terms, places, slots, asm.R6, true, prefix, pass, filterDropLabel)
		if !ok {
			return nil, false
		}
		if i > 0 {
			body[0] = body[0].WithSymbol(block(i - 1))
		}
		out = append(out, body...)
	}
	return append(out,
		asm.Mov.Imm(asm.R0, 0).WithSymbol(filterDropLabel),
		asm.Return(),
		asm.Mov.Reg(asm.R1, asm.R6).WithSymbol(pass),
	), true
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
	filterRestoreLabel = "probekit_filter_restore"
)

// filterInstructions compiles terms (groups joined by ||, each a run of
// terms joined by && up to one with OrAfter) into instructions that
// return 0 from the program for a hit no group holds for, and go on to
// the instruction after them, with the context in r1, otherwise: jumps
// to filterPassLabel, which the caller puts on the program's first
// instruction. places says where each argument is; slots bounds the
// context's offsets; absentFails is filterBlock's. It reports false for a term it cannot compile, and
// for a filter that drops every hit (the program's own code would be
// unreachable, which the verifier refuses); nil instructions and true
// for one that drops none.
func filterInstructions(terms []filterTerm, places map[int]usdt.Place, slots int, absentFails bool) (asm.Instructions, bool) {
	helper := hasHelperTerm(terms)
	pass, ctx := filterPassLabel, asm.R1
	var out asm.Instructions
	if helper {
		// A helper call (pid, tid) clobbers r1-r5: the context waits
		// in r6, which the program's own code sets before it reads it.
		pass, ctx = filterRestoreLabel, asm.R6
		out = append(out, asm.Mov.Reg(asm.R6, asm.R1))
	}
	body, ok := filterBlock(terms, places, slots, ctx, absentFails, "probekit_filter_", pass, filterDropLabel)
	switch {
	case !ok:
		return nil, false
	case len(body) == 1 && body[0].Reference() == pass:
		return nil, true
	case len(body) == 1 && body[0].Reference() == filterDropLabel:
		return nil, false
	}
	out = append(out, body...)
	out = append(out, asm.Mov.Imm(asm.R0, 0).WithSymbol(filterDropLabel), asm.Return())
	if helper {
		out = append(out, asm.Mov.Reg(asm.R1, asm.R6).WithSymbol(pass))
	}
	return out, true
}

// hasHelperTerm reports whether a term calls a helper (pid, tid).
func hasHelperTerm(terms []filterTerm) bool {
	for _, t := range terms {
		if f := FilterField(t.Field); f == FilterPID || f == FilterTID {
			return true
		}
	}
	return false
}

// filterBlock compiles terms, with the arguments at places and the
// context in ctx, into instructions that jump to pass for a hit some
// group holds for and to drop otherwise; its labels begin with prefix. A
// term on a value without a place fails (absentFails: a function's value
// its registers do not have) or is refused (a USDT argument, which the
// program may still read from the site's spec). Groups decided before
// load take no instruction (false) or end the filter (true); a filter
// decided entirely is one jump, to pass or to drop.
func filterBlock(terms []filterTerm, places map[int]usdt.Place, slots int, ctx asm.Register, absentFails bool, prefix, pass, drop string) (asm.Instructions, bool) {
	// The groups that decide, in order, up to one that always holds.
	var groups [][]filterTerm
	always := false
	for start, i := 0, 0; i < len(terms) && !always; i++ {
		if terms[i].OrAfter == 0 && i < len(terms)-1 {
			continue
		}
		g := terms[start : i+1]
		start = i + 1
		body, ok := groupInstructions(g, places, slots, ctx, absentFails, drop, "")
		switch {
		case !ok:
			return nil, false
		case len(body) == 1 && body[0].OpCode.JumpOp() == asm.Ja:
			// Never holds.
		case len(body) == 0:
			always = true
		default:
			groups = append(groups, g)
		}
	}
	switch {
	case len(groups) == 0 && always:
		return asm.Instructions{asm.Ja.Label(pass)}, true
	case len(groups) == 0:
		return asm.Instructions{asm.Ja.Label(drop)}, true
	}
	label := func(k int) string { return fmt.Sprintf("%sgroup_%d", prefix, k) }
	var out asm.Instructions
	for k, g := range groups {
		last := k == len(groups)-1
		fail, jumpPass := label(k+1), ""
		switch {
		case last && always:
			fail = pass
		case last:
			// Holds: on to pass; else on to the drop.
			fail, jumpPass = drop, pass
		}
		body, _ := groupInstructions(g, places, slots, ctx, absentFails, fail, jumpPass)
		if k > 0 {
			body[0] = body[0].WithSymbol(label(k))
		}
		out = append(out, body...)
		if jumpPass == "" {
			out = append(out, asm.Ja.Label(pass))
		}
	}
	if !always {
		// A jump by 0 where the drop follows, which the verifier
		// removes.
		out = append(out, asm.Ja.Label(drop))
	}
	return out, true
}

// groupInstructions compiles terms joined by &&: each term's value into
// r2 (an argument's register read from the context in ctx) and a jump to fail when it does not hold; with pass set, the last
// term jumps to pass when it holds instead, and the group falls through
// when it does not. A term decided before load (an argument that is a
// constant; with absentFails, one without a place) takes no instruction,
// or makes the group one jump to fail.
func groupInstructions(terms []filterTerm, places map[int]usdt.Place, slots int, ctx asm.Register, absentFails bool, fail, pass string) (asm.Instructions, bool) {
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
		if !ok && absentFails {
			return asm.Instructions{asm.Ja.Label(fail)}, true
		}
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
