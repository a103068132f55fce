package record

import (
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/probekit/probekit/bpfunwind"
	"github.com/probekit/probekit/internal/features"
	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/interp/python"
)

// With an interpreter map, a CFI stack's load puts the interpreter walk
// in front of the trace programs: Program and FuncProgram are the walk
// programs (what is attached), which tail-call the trace programs. Both
// program kinds, records and a KeyStackCFI key, perf-event and
// uprobe_multi attach types, and faulting strings asked for: a
// sleepable program cannot tail-call, so they load without them.
func TestLoadInterpWalk(t *testing.T) {
	testkit.RequireKernel(t)
	testkit.SkipOnOldKernel(t, "6.18", "Python frames in --stack (the trace program with the Python walk: Debian's 6.1 verifier refuses it)")
	haveSleepable, err := features.Have(features.SleepableUprobe)
	if err != nil {
		t.Fatal(err)
	}
	haveMulti, err := features.Have(features.UprobeMulti)
	if err != nil {
		t.Fatal(err)
	}
	cfi, err := bpfunwind.New(&bpfunwind.Options{Rows: 16, Objects: 1, Processes: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer cfi.Close()
	py, err := python.NewTables(&python.TablesOptions{Processes: 1})
	if err != nil {
		testkit.Unavailable(t, "%v", err)
	}
	defer py.Close()
	for _, keyed := range []bool{false, true} {
		for _, multi := range []bool{false, true} {
			for _, fault := range []bool{false, true} {
				name := map[bool]string{false: "records", true: "keyed"}[keyed] + map[bool]string{false: "", true: "/multi"}[multi] +
					map[bool]string{false: "", true: "/faulting"}[fault]
				t.Run(name, func(t *testing.T) {
					if multi && !haveMulti || fault && !haveSleepable {
						testkit.Unavailable(t, "uprobe_multi %v, sleepable uprobes %v", haveMulti, haveSleepable)
					}
					spec, err := Spec()
					if err != nil {
						t.Fatal(err)
					}
					if err := spec.Variables[CookieFlagName].Set(true); err != nil {
						t.Fatal(err)
					}
					if keyed {
						if err := SetMode(spec, ModeCount, 0); err != nil {
							t.Fatal(err)
						}
						if err := SetKeys(spec, []KeyPart{{Kind: KeyStackCFI}}); err != nil {
							t.Fatal(err)
						}
					} else if err := SetStackCFI(spec); err != nil {
						t.Fatal(err)
					}
					if fault {
						if err := SetFaultingStrings(spec); err != nil {
							t.Fatal(err)
						}
					}
					if multi {
						spec.Programs[ProgramName].AttachType = ebpf.AttachTraceUprobeMulti
						spec.Programs[FuncProgramName].AttachType = ebpf.AttachTraceUprobeMulti
					}
					if err := cfi.Prepare(spec); err != nil {
						t.Fatal(err)
					}
					if err := py.Prepare(spec); err != nil {
						t.Fatal(err)
					}
					repl := cfi.Replacements()
					for k, v := range py.Replacements() {
						repl[k] = v
					}
					objs, err := LoadSpecOptions(spec, USDTProgram|FuncProgram, &ebpf.CollectionOptions{MapReplacements: repl})
					if err != nil {
						t.Fatal(err)
					}
					defer objs.Close()
					if objs.FaultingStrings {
						t.Error("loaded sleepable, with faulting strings")
					}
					for prog, want := range map[*ebpf.Program]string{objs.Program: InterpProgramName, objs.FuncProgram: InterpFuncProgramName} {
						info, err := prog.Info()
						if err != nil {
							t.Fatal(err)
						}
						// The kernel keeps 15 bytes of a name.
						if !strings.HasPrefix(want, info.Name) || len(info.Name) < 15 {
							t.Errorf("attached program %q, want %s", info.Name, want)
						}
					}
					if len(objs.tail) != 2 || objs.tail[0] == nil || objs.tail[1] == nil || objs.tailMap == nil {
						t.Errorf("tail-called programs %v, array %v", objs.tail, objs.tailMap)
					}
				})
			}
		}
	}
	// Without the interpreter map: the trace programs themselves.
	spec, err := Spec()
	if err != nil {
		t.Fatal(err)
	}
	if err := SetStackCFI(spec); err != nil {
		t.Fatal(err)
	}
	if err := cfi.Prepare(spec); err != nil {
		t.Fatal(err)
	}
	objs, err := LoadSpecOptions(spec, FuncProgram, &ebpf.CollectionOptions{MapReplacements: cfi.Replacements()})
	if err != nil {
		t.Fatal(err)
	}
	defer objs.Close()
	if info, err := objs.FuncProgram.Info(); err != nil || info.Name != FuncProgramName || objs.tail != nil {
		t.Errorf("without an interpreter map: %q (%v), tail %v", info.Name, err, objs.tail)
	}
}
