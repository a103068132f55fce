package elfseed_test

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"slices"
	"testing"

	"github.com/probekit/probekit/debuginfo"
	"github.com/probekit/probekit/internal/safeelf"
	"github.com/probekit/probekit/internal/test/elfseed"
	"github.com/probekit/probekit/unwind"
	"github.com/probekit/probekit/usdt"
)

func open(t *testing.T, b []byte) *safeelf.File {
	t.Helper()
	if _, err := elf.NewFile(bytes.NewReader(b)); err != nil {
		t.Fatalf("debug/elf: %v", err)
	}
	f, err := safeelf.NewFile(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// funcs are the names and addresses of f's functions.
func funcs(t *testing.T, f *safeelf.File) map[string]uint64 {
	t.Helper()
	fns, err := f.Functions()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for i := range fns.Len() {
		out[fns.Name(i)] = fns.Address(i)
	}
	return out
}

// Each seed is small and holds what its name says, as probekit's own
// parsers read it: a seed that parsed to nothing would fuzz only the
// first checks.
func TestSeeds(t *testing.T) {
	elfseed.Each(func(name string, b []byte) {
		if len(b) > 1536 {
			t.Errorf("%s: %d bytes", name, len(b))
		}
		t.Logf("%s: %d bytes", name, len(b))
	})
	want := map[string]uint64{"f": elfseed.TextAddr, "g": elfseed.TextAddr + 8}

	nf, err := usdt.Parse(bytes.NewReader(elfseed.Notes()))
	if err != nil {
		t.Fatal(err)
	}
	var probes []string
	for _, p := range nf.Probes {
		probes = append(probes, p.Provider+":"+p.Name)
	}
	if !slices.Equal(probes, []string{"seed:plain", "seed:gated"}) {
		t.Errorf("notes: probes %v", probes)
	}
	if id, err := open(t, elfseed.Notes()).BuildID(); err != nil || !bytes.Equal(id, elfseed.BuildID) {
		t.Errorf("notes: build ID %x, %v", id, err)
	}

	if got := funcs(t, open(t, elfseed.Symbols())); got["f"] != want["f"] || got["g"] != want["g"] {
		t.Errorf("symbols: %v", got)
	}
	if got := funcs(t, open(t, elfseed.GoTable())); got["main.f"] != want["f"] || got["main.g"] != want["g"] {
		t.Errorf("go: %v", got)
	}

	for _, name := range []string{"dwarf", "compressed"} {
		ef := open(t, elfseed.All()[name])
		l, err := debuginfo.OpenLinesELF(ef, nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		fr, err := l.Frames(nil, elfseed.TextAddr+9)
		if err != nil || len(fr) != 1 || fr[0].Function != "g" || fr[0].Line != 5 {
			t.Errorf("%s: frames at g+1: %+v, %v", name, fr, err)
		}
		if fr, _ := l.Frames(nil, elfseed.TextAddr+4); len(fr) != 1 || fr[0].Function != "f" || fr[0].Line != 4 {
			t.Errorf("%s: frames at f+4: %+v", name, fr)
		}
	}

	tab, err := unwind.Load(open(t, elfseed.CFI()))
	if err != nil {
		t.Fatal(err)
	}
	if tab.Len() != 2 {
		t.Errorf("cfi: %d FDEs", tab.Len())
	}
	if row, err := tab.Find(elfseed.TextAddr + 8 + 2); err != nil || row.CFA.Reg != unwind.RegRSP || row.CFA.Off != 16 || row.Regs[unwind.RegRBP].Off != -16 {
		t.Errorf("cfi: row in g after its push: %+v, %v", row, err)
	}
	if _, err := unwind.Parse(elfseed.EHFrame(0x1000), 0x1000, false, binary.LittleEndian); err != nil {
		t.Errorf("EHFrame alone: %v", err)
	}

	if name, crc, ok, err := open(t, elfseed.DebugLink("seed.debug", elfseed.DWARF())).DebugLink(); err != nil || !ok || name != "seed.debug" || crc == 0 {
		t.Errorf("debuglink: %q %#x %v %v", name, crc, ok, err)
	}
}

func TestFuzzing(t *testing.T) {
	if elfseed.Fuzzing() {
		t.Error("Fuzzing under go test without -fuzz")
	}
}
