package record

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/probekit/probekit/internal/features"
	"github.com/probekit/probekit/internal/test/testkit"
)

// modeEventsWakeup is ModeEvents with a wakeup threshold (SetRingSize).
const modeEventsWakeup Mode = 99

// modeLatencyKeyed is ModeLatency with keys (a string among them) and a
// filter: every part of its start's code live.
const modeLatencyKeyed Mode = 98

// modeCountFiltered is ModeCount with keys and a filter of
// MaxFilterTerms terms, of every field and every operator: the most
// filter code the verifier keeps.
const modeCountFiltered Mode = 97

var everyTerm = []FilterTerm{
	{Field: FilterStr, Op: FilterPrefix, Val: 0, Str: "x"},
	{Field: FilterArg, Op: FilterGT, Val: 3, Num: 1},
	{Field: FilterPID, Op: FilterNE, Num: 1, OrAfter: true},
	{Field: FilterComm, Op: FilterEQ, Str: "y"},
	{Field: FilterTID, Op: FilterLE, Num: -1},
	{Field: FilterStr, Op: FilterNotPrefix, Val: 1, Str: "abc"},
	{Field: FilterArg, Op: FilterLT, Val: 11, Num: 5, OrAfter: true},
	{Field: FilterComm, Op: FilterNE, Str: "a-name-of-15-ch"},
}

// Every combination of the choices made before load verifies on the
// running kernel: program (USDT, function), spec ids by cookie or IP
// map (a USDT spec's, a function probe's FuncIPs entry), stack on or off, strings read or not, mode. The verifier of each
// kernel walks each combination's code differently: Linux 6.1's refused
// trace_func with the stack and strings on ("R1 unbounded memory access"
// at bpf_probe_read_user_str) where 6.18's accepted it. With BPF cookies,
// each also loads sleepable with faulting strings (SetFaultingStrings)
// where the kernel has them, and must not fall back.
func TestLoadEveryMode(t *testing.T) {
	testkit.RequireKernel(t)
	haveCookie, err := features.Have(features.Cookie)
	if err != nil {
		t.Fatal(err)
	}
	haveSleepable, err := features.Have(features.SleepableUprobe)
	if err != nil {
		t.Fatal(err)
	}
	for _, which := range []Programs{USDTProgram, FuncProgram} {
		for _, cookie := range []bool{true, false} {
			for _, stack := range []uint32{0, 1, stackCFI} {
				for _, mf := range []struct {
					mode  Mode
					fault bool
				}{{ModeEvents, false}, {ModeCount, false}, {ModeHist, false}, {ModeLatency, false}, {modeEventsWakeup, false}, {modeLatencyKeyed, false}, {modeCountFiltered, false},
					{ModeEvents, true}, {ModeCount, true}, {ModeLatency, true}, {modeLatencyKeyed, true}, {modeCountFiltered, true},
					// A trace's records: the wakeup threshold on, faulting.
					{modeEventsWakeup, true}} {
					mode, fault := mf.mode, mf.fault
					if stack == stackCFI && mode != ModeEvents && mode != modeEventsWakeup {
						continue // records only: the other modes send none
					}
					if fault && !cookie {
						continue
					}
					if haveCookie && !cookie && stack != 0 {
						// Where the kernel has BPF cookies, programs go
						// without them only when a test turns them off
						// (features.ForceOff), with or without a stack
						// alike: one stack setting covers those; kernels
						// without cookies load every combination.
						continue
					}
					name := fmt.Sprintf("prog%d/cookie=%v/stack=%d/mode%d", which, cookie, stack, mode)
					if fault {
						name += "/faulting"
					}
					t.Run(name, func(t *testing.T) {
						if cookie {
							testkit.NeedFeature(t, haveCookie, nil, features.Cookie.Since(), features.Cookie.String())
						}
						if fault {
							testkit.NeedFeature(t, haveSleepable, nil, features.SleepableUprobe.Since(), features.SleepableUprobe.String())
						}
						spec, err := Spec()
						if err != nil {
							t.Fatal(err)
						}
						set := map[string]any{CookieFlagName: cookie, StackName: stack, StrMaskName: uint32(0xf)}
						for k, v := range set {
							if err := spec.Variables[k].Set(v); err != nil {
								t.Fatalf("%s: %v", k, err)
							}
						}
						if mode == modeEventsWakeup {
							// SetRingSize turns the wakeup threshold on.
							if err := SetRingSize(spec, 1<<20, os.Getpagesize()); err != nil {
								t.Fatal(err)
							}
						} else if mode == modeLatencyKeyed {
							if err := SetMode(spec, ModeLatency, 0); err != nil {
								t.Fatal(err)
							}
							if err := SetKeys(spec, []KeyPart{{Kind: KeyStr, Val: 1}, {Kind: KeyArg, Val: 2}, {Kind: KeyComm}, {Kind: KeyProbe}}); err != nil {
								t.Fatal(err)
							}
							if err := SetFilter(spec, []FilterTerm{{Field: FilterStr, Op: FilterPrefix, Val: 0, Str: "x"}, {Field: FilterArg, Op: FilterGT, Val: 3, Num: 1, OrAfter: true}, {Field: FilterComm, Op: FilterEQ, Str: "y"}}); err != nil {
								t.Fatal(err)
							}
						} else if mode == modeCountFiltered {
							if err := SetMode(spec, ModeCount, 0); err != nil {
								t.Fatal(err)
							}
							if err := SetKeys(spec, []KeyPart{{Kind: KeyStr, Val: 2}, {Kind: KeyArg, Val: 1}, {Kind: KeyComm}, {Kind: KeyProbe}}); err != nil {
								t.Fatal(err)
							}
							if err := SetFilter(spec, everyTerm); err != nil {
								t.Fatal(err)
							}
						} else if err := SetMode(spec, mode, 1); err != nil {
							t.Fatal(err)
						}
						if fault {
							if err := SetFaultingStrings(spec); err != nil {
								t.Fatal(err)
							}
						}
						objs, err := LoadSpec(spec, which)
						if err != nil {
							var ve *ebpf.VerifierError
							if errors.As(err, &ve) {
								t.Fatalf("%+v", ve)
							}
							t.Fatal(err)
						}
						objs.Close()
						// Every kernel with sleepable uprobe programs loads them
						// all sleepable: Debian's 6.1 refused the CFI walk's
						// until the faulting read stopped branching on its
						// faults (trace.c's read_user_str).
						if objs.FaultingStrings != fault {
							t.Errorf("loaded with FaultingStrings %v, want %v: %s", objs.FaultingStrings, fault, verifierTail(objs.SleepableRefusal, 12))
						}
					})
				}
			}
		}
	}
}

// Without a KeyStackCFI part the CFI walk's functions leave the
// programs: no call of trace_cfi_stack_id is left, and neither it nor
// the walk's step (unwind.bpf.h's probekit_cfi_step) is in any program.
func TestDropCFIWalk(t *testing.T) {
	spec, err := Spec()
	if err != nil {
		t.Fatal(err)
	}
	has := func(p *ebpf.ProgramSpec, sym string) bool {
		for _, ins := range p.Instructions {
			if ins.Symbol() == sym || ins.Reference() == sym {
				return true
			}
		}
		return false
	}
	// The interpreter walk's programs have no CFI walk: they tail-call
	// the trace programs (interp.go).
	delete(spec.Programs, InterpProgramName)
	delete(spec.Programs, InterpFuncProgramName)
	before := map[string]int{}
	for name, p := range spec.Programs {
		if !has(p, cfiFunction) || !has(p, cfiFramesFunction) || !has(p, "probekit_cfi_step") {
			t.Fatalf("%s: no CFI walk to drop", name)
		}
		before[name] = len(p.Instructions)
	}
	dropCFIWalk(spec, false, false)
	for name, p := range spec.Programs {
		if has(p, cfiFunction) || has(p, cfiFramesFunction) || has(p, "probekit_cfi_step") {
			t.Errorf("%s: the CFI walk is left", name)
		}
		if len(p.Instructions) >= before[name] {
			t.Errorf("%s: %d instructions, %d before", name, len(p.Instructions), before[name])
		}
	}
}

// verifierTail is err's last n lines, a verifier log's end (where the
// refusal is said) when err holds one.
func verifierTail(err error, n int) string {
	var ve *ebpf.VerifierError
	if !errors.As(err, &ve) {
		return fmt.Sprint(err)
	}
	log := ve.Log
	if len(log) > n {
		log = log[len(log)-n:]
	}
	return fmt.Sprintf("%v\n%s", ve.Cause, strings.Join(log, "\n"))
}
