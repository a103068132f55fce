package usdt_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cilium/ebpf/link"

	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/usdt"
)

// enotsupp is the kernel-internal ENOTSUPP (include/linux/errno.h) that
// uprobe registration returns for an instruction it cannot probe.
const enotsupp = syscall.Errno(524)

// nopSites are the probes of testdata/usdt_nops.c and the NOP each one's
// site holds.
var nopSites = []struct {
	name string
	kind usdt.SiteKind
	n    int
}{
	{"nop1", usdt.SiteNop, 1},
	{"xchg", usdt.SiteNop, 2},
	{"nop3", usdt.SiteNop, 3},
	{"nop5", usdt.SiteNop, 5},
	{"nop9", usdt.SiteNop, 9},
	{"nop_nop5", usdt.SiteNopNop5, 6},
	{"nop_nop10", usdt.SiteNopNop10, 11},
}

// TestNopSites: a probe whose instruction is another x86 NOP than "nop"
// (a bare 5-byte nopl, xchg %ax,%ax, a 9-byte NOP with a prefix,
// libbpf's pairs) is accepted with its length, attached, and the BPF
// program reads its arguments, through a uprobe_multi link and through
// perf-event uprobes alike.
func TestNopSites(t *testing.T) {
	path := testkit.Fixture("usdt_nops")
	locs := map[string]*usdt.Location{}
	for _, s := range nopSites {
		l := nopSite(t, path, s.name)
		if l.SiteErr != nil || l.Site != s.kind || l.SiteLength != s.n {
			t.Errorf("%s: site %v, %d bytes, %v; want %v, %d bytes", s.name, l.Site, l.SiteLength, l.SiteErr, s.kind, s.n)
		}
		locs[s.name] = l
	}
	if t.Failed() {
		return
	}

	testkit.RequireKernel(t)
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			forceOff(t, mode.off)
			tr := newTracer(t, false)
			fx := testkit.Start(t, path)
			for _, s := range nopSites {
				l := tr.attach(path, "nops", s.name, &usdt.Options{PID: fx.PID()})
				want := fx.Fire(s.name, 3)
				got := tr.hits(len(want))
				for i := range want {
					checkValues(t, s.name, locs[s.name], want[i], got[i])
				}
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// nopSite parses the usdt_nops file at path and returns the one location
// of probe nops:name.
func nopSite(t *testing.T, path, name string) *usdt.Location {
	t.Helper()
	file, err := usdt.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	p, err := file.Find("nops", name)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Locations) != 1 {
		t.Fatalf("%s: %d locations, want 1", name, len(p.Locations))
	}
	return &p.Locations[0]
}

// patchNop5 writes a copy of usdt_nops whose nops:nop5 site holds code
// (5 bytes) and returns its path.
func patchNop5(t *testing.T, code []byte) string {
	t.Helper()
	src := testkit.Fixture("usdt_nops")
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	copy(b[nopSite(t, src, "nop5").FileOffset:], code)
	path := filepath.Join(t.TempDir(), "usdt_nops")
	if err := os.WriteFile(path, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestNopSegmentPrefix: the kernel places no uprobe on an x86 instruction
// with a CS, DS, ES or SS prefix, NOP or not, so such a site is refused
// when the file is parsed, saying why, rather than by the kernel with
// ENOTSUPP at attach time. An FS prefix is fine for both.
func TestNopSegmentPrefix(t *testing.T) {
	cs := patchNop5(t, []byte{0x2e, 0x0f, 0x1f, 0x40, 0x00}) // nopl %cs:0x0(%rax)
	fs := patchNop5(t, []byte{0x64, 0x0f, 0x1f, 0x40, 0x00}) // nopl %fs:0x0(%rax)
	csLoc, fsLoc := nopSite(t, cs, "nop5"), nopSite(t, fs, "nop5")
	if csLoc.Site != usdt.SiteNop || csLoc.SiteLength != 5 || !errors.Is(csLoc.SiteErr, usdt.ErrBadSite) ||
		!strings.Contains(csLoc.SiteErr.Error(), "2e segment prefix") {
		t.Fatalf("%%cs NOP: %v, %d bytes, %v; want a NOP of 5 bytes refused for its prefix", csLoc.Site, csLoc.SiteLength, csLoc.SiteErr)
	}
	if fsLoc.Site != usdt.SiteNop || fsLoc.SiteLength != 5 || fsLoc.SiteErr != nil {
		t.Fatalf("%%fs NOP: %v, %d bytes, %v; want a NOP of 5 bytes", fsLoc.Site, fsLoc.SiteLength, fsLoc.SiteErr)
	}

	testkit.RequireKernel(t)
	tr := newTracer(t, false)
	// The kernel agrees: a plain uprobe there fails (when it analyses the
	// instruction, as a process maps the file).
	testkit.Start(t, cs)
	ex, err := link.OpenExecutable(cs)
	if err != nil {
		t.Fatal(err)
	}
	if l, err := ex.Uprobe("nop5", tr.prog(), &link.UprobeOptions{Address: csLoc.FileOffset}); !errors.Is(err, enotsupp) {
		if err == nil {
			l.Close()
		}
		t.Fatalf("raw uprobe on the %%cs NOP: %v, want ENOTSUPP", err)
	}
	if _, err := tr.att.Attach(tr.prog(), cs, "nops", "nop5", nil); !errors.Is(err, usdt.ErrBadSite) {
		t.Fatalf("Attach on the %%cs NOP: %v, want ErrBadSite", err)
	}
	fx := testkit.Start(t, fs)
	tr.attach(fs, "nops", "nop5", &usdt.Options{PID: fx.PID()})
	want := fx.Fire("nop5", 2)
	got := tr.hits(len(want))
	for i := range want {
		checkValues(t, "nop5", fsLoc, want[i], got[i])
	}
}
