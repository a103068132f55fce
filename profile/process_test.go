package profile

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/probekit/probekit/internal/safeelf"
	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/procmaps"
)

// Processes names a live fixture's addresses, return addresses looked
// up one byte back, and gives its executable mapping with the build-id
// readelf prints.
func TestProcesses(t *testing.T) {
	fx := testkit.Fixture("stack_chain_nofp")
	p := testkit.Start(t, fx)
	raw, err := os.ReadFile(fx)
	if err != nil {
		t.Fatal(err)
	}
	ef, err := safeelf.NewFile(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	syms, err := ef.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	proc, err := procmaps.Open(p.PID())
	if err != nil {
		t.Fatal(err)
	}
	id, err := procmaps.IDOf(fx)
	if err != nil {
		t.Fatal(err)
	}
	obj, err := proc.Object(id)
	if err != nil {
		t.Fatal(err)
	}
	runtime := func(name string, plus uint64) uint64 {
		var v uint64
		syms.Lookup(name, func(i int) bool { v = syms.Value(i); return false })
		off, ok := ef.Loads().CodeOffset(v + plus)
		if v == 0 || !ok {
			t.Fatalf("%s: no code symbol", name)
		}
		a, err := obj.Address(off, procmaps.Exec)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	// The instruction pointer at chain_c's first byte; return
	// addresses one byte into chain_b and chain_a: looked up at -1,
	// their first bytes.
	addrs := []uint64{runtime("chain_c", 0), runtime("chain_b", 1), runtime("chain_a", 1)}
	locs, err := NewProcesses(nil).Locate(uint32(p.PID()), addrs)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := exec.Command("readelf", "-n", fx).Output()
	for i, want := range []string{"chain_c", "chain_b", "chain_a"} {
		l := locs[i]
		if len(l.Lines) != 1 || l.Lines[0].Function != want || l.Mapping == nil || filepath.Base(l.Mapping.File) != "stack_chain_nofp" ||
			len(l.Mapping.BuildID) != 40 || !strings.Contains(string(out), "Build ID: "+l.Mapping.BuildID) {
			t.Errorf("%#x: %+v %+v, want %s in the fixture's mapping", addrs[i], l.Lines, l.Mapping, want)
		}
	}
}
