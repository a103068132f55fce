package smoke

import (
	"os"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"github.com/probekit/probekit/internal/testkit"
)

func TestMain(m *testing.M) { os.Exit(testkit.RunWithLeakCheck(m)) }

// countingProgram increments slot 0 of an array map on every hit.
func countingProgram(t *testing.T) (*ebpf.Program, *ebpf.Map) {
	t.Helper()
	counter, err := ebpf.NewMap(&ebpf.MapSpec{
		Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { counter.Close() })
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:    ebpf.Kprobe,
		License: "GPL",
		Instructions: asm.Instructions{
			// key = 0 on the stack
			asm.StoreImm(asm.RFP, -4, 0, asm.Word),
			asm.LoadMapPtr(asm.R1, counter.FD()),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, -4),
			asm.FnMapLookupElem.Call(),
			asm.JEq.Imm(asm.R0, 0, "out"),
			asm.Mov.Imm(asm.R1, 1),
			asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
			asm.Mov.Imm(asm.R0, 0).WithSymbol("out"),
			asm.Return(),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { prog.Close() })
	return prog, counter
}

func TestUprobeFires(t *testing.T) {
	testkit.RequireKernel(t)
	prog, counter := countingProgram(t)

	p := testkit.Start(t, testkit.Fixture("usdt_sample"))
	ex, err := link.OpenExecutable(testkit.Fixture("usdt_sample"))
	if err != nil {
		t.Fatal(err)
	}
	// fire_loop is a noinline function of the fixture, one call per round.
	l, err := ex.Uprobe("fire_loop", prog, &link.UprobeOptions{PID: p.PID()})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	const rounds = 37
	if err := p.Loop("loop", rounds); err != nil {
		t.Fatal(err)
	}
	var got uint64
	if err := counter.Lookup(uint32(0), &got); err != nil {
		t.Fatal(err)
	}
	if got != rounds {
		t.Fatalf("uprobe fired %d times, want %d", got, rounds)
	}
}
