package record

import (
	"testing"

	"github.com/probekit/probekit/internal/features"
	"github.com/probekit/probekit/internal/test/testkit"
)

// A KeyStack key part uses the stack trace map, which sleepable programs
// may not: the programs load non-sleepable, their strings not faulting.
func TestLoadFaultingStringsStackKey(t *testing.T) {
	testkit.RequireKernel(t)
	ok, err := features.Have(features.SleepableUprobe)
	testkit.NeedFeature(t, ok, err, features.SleepableUprobe.Since(), features.SleepableUprobe.String())
	spec, err := Spec()
	if err != nil {
		t.Fatal(err)
	}
	if err := SetMode(spec, ModeCount, 0); err != nil {
		t.Fatal(err)
	}
	if err := SetKeys(spec, []KeyPart{{Kind: KeyStack}}); err != nil {
		t.Fatal(err)
	}
	if err := SetFaultingStrings(spec); err != nil {
		t.Fatal(err)
	}
	objs, err := LoadSpec(spec, FuncProgram)
	if err != nil {
		t.Fatal(err)
	}
	defer objs.Close()
	if objs.FaultingStrings {
		t.Error("loaded sleepable with a stack trace map")
	}
}
