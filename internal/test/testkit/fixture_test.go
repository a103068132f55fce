package testkit

import (
	"os"
	"reflect"
	"testing"
)

func TestMain(m *testing.M) { os.Exit(RunWithLeakCheck(m)) }

func TestFixtureReportsValues(t *testing.T) {
	p := Start(t, Fixture("usdt_sample"))
	if p.PID() <= 0 {
		t.Fatalf("pid %d", p.PID())
	}
	hits := p.Fire("sizes", 2)
	want := []Hit{
		{Probe: "sizes", Args: []int64{-5, 250, -1234, 60000, -123456, 4000000000, -1234567890123, -616}},
		{Probe: "sizes", Args: []int64{-6, 251, -1235, 60001, -123457, 4000000001, -1234567890124, -615}},
	}
	if !reflect.DeepEqual(hits, want) {
		t.Fatalf("sizes: got %+v, want %+v", hits, want)
	}
	if hits := p.Fire("inlined", 1); len(hits) != 3 {
		t.Fatalf("inlined: %d hits, want 3", len(hits))
	}
	if hits := p.Fire("sema", 1); len(hits) != 1 || !hits[0].Skipped {
		t.Fatalf("sema without tracer: %+v, want skipped", hits)
	}
	if err := p.Loop("loop", 1000); err != nil {
		t.Fatal(err)
	}
}

func TestReadUint16(t *testing.T) {
	RequireKernel(t) // reading another process's memory needs ptrace rights
	p := Start(t, Fixture("usdt_sample"))
	// The ELF header of the main executable is mapped at its load base;
	// its first two bytes are "\x7fE".
	base := mainBase(t, p.PID())
	v, err := ReadUint16(p.PID(), base)
	if err != nil {
		t.Fatal(err)
	}
	if v != 0x457f {
		t.Fatalf("got %#x, want 0x457f", v)
	}
}
