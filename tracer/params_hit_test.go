package tracer_test

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/probe"
	"github.com/probekit/probekit/tracer"
)

// paramsString writes a hit's named values as "TYPE NAME=VALUE (TEXT), ..."
// with VALUE in Go syntax (%#v; a struct's members in braces).
func paramsString(ps []tracer.Param) string {
	var parts []string
	for _, p := range ps {
		v := fmt.Sprintf("%#v", p.Value)
		if ms, ok := p.Value.([]tracer.Param); ok {
			v = "{" + paramsString(ms) + "}"
		}
		parts = append(parts, fmt.Sprintf("%s %s=%s (%s)", p.Type.Name, p.Name, v, p.Text))
	}
	return strings.Join(parts, ", ")
}

// Hit.Params through Run with OnHit: the C fixture's parameters at the
// entries of emit, mix and byval and label's result, named and typed by
// DWARF, with the values the BPF program read (integers by size and
// sign, strings read, pointers as addresses, the struct in rdi by its
// members, what is in memory or xmm0 nil); params_dwz reads its names
// and types from its dwz common file. params calls, per round r,
// emit(r, "x"), mix(r, -5e9, 4e9u, &pt, "probekit-params", &pt),
// byval(pt {3, -4}, big, 2.5, "buffer"), label(r).
func TestRunOnHitParams(t *testing.T) {
	testkit.RequireKernel(t)
	if runtime.GOARCH != "amd64" {
		t.Skip("the fixture's registers are x86-64's")
	}
	for _, name := range []string{"params_O2", "params_dwz"} {
		t.Run(name, func(t *testing.T) {
			fx := filepath.Join(testkit.Root(), "testdata", "params", "bin", name)
			var specs []probe.Spec
			for _, p := range []string{"uprobe:" + fx + ":emit", "uprobe:" + fx + ":mix", "uprobe:" + fx + ":byval", "uretprobe:" + fx + ":label"} {
				s, err := probe.Parse(p)
				if err != nil {
					t.Fatal(err)
				}
				specs = append(specs, s)
			}
			var got []string
			var ptr []uint64 // mix's p and pt, per round
			cfg := &tracer.Config{
				Probes:   specs,
				Command:  []string{fx, "2"},
				Warnings: new(strings.Builder),
				OnHit: func(h *tracer.Hit) error {
					ps := h.Params()
					got = append(got, h.Site.Function+": "+paramsString(ps))
					if h.Site.Function == "mix" && len(ps) == 6 {
						p, _ := ps[3].Value.(uint64)
						pt, _ := ps[5].Value.(uint64)
						ptr = append(ptr, p, pt)
					}
					return nil
				},
			}
			if err := tracer.Run(context.Background(), cfg); err != nil {
				t.Fatalf("Run: %v (%s)", err, cfg.Warnings)
			}
			if len(got) != 8 || len(ptr) != 4 {
				t.Fatalf("%d hits, %d pointers:\n%s", len(got), len(ptr), strings.Join(got, "\n"))
			}
			for r := range 2 {
				p := ptr[2*r]
				if p == 0 || ptr[2*r+1] != p {
					t.Errorf("round %d: mix's p %#x and pt %#x, want the same address (&pt)", r, p, ptr[2*r+1])
				}
				want := []string{
					fmt.Sprintf(`emit: int i=%d (%[1]d), const char * name="x" ("x")`, r),
					fmt.Sprintf(`mix: int i=%d (%[1]d), long l=-5000000000 (-5000000000), unsigned int u=0xee6b2800 (4000000000), `+
						`void * p=%#[2]x (%#[2]x), const char * s="probekit-params" ("probekit-params"), struct point * pt=%#[2]x ((struct point *)%#[2]x)`, r, p),
					`byval: struct point pt={int x=3 (3), int y=-4 (-4)} ({x=3, y=-4}), struct big b=<nil> (<struct big, not shown>), ` +
						`double d=<nil> (<double, not shown>), char * buf="buffer" ("buffer")`,
					fmt.Sprintf(`label: const char * =%q (%[1]q)`, []string{"even", "odd"}[r]),
				}
				for i, w := range want {
					if g := got[4*r+i]; g != w {
						t.Errorf("round %d hit %d:\n got %s\nwant %s", r, i, g, w)
					}
				}
			}
		})
	}
}
