package bpf_test

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/usdt"
)

// Two units that both include usdt.bpf.h (testdata/link_one.c and
// link_two.c, the second with PROBEKIT_USDT_EXTERN_MAPS) link into one
// object with `bpftool gen object`, as libbpf's selftests link
// test_usdt.c and test_usdt_multispec.c; the object loads, one Attacher
// attaches both units' programs, and each reads its probe's arguments
// through the one spec map.
func TestLinkedUnits(t *testing.T) {
	testkit.RequireKernel(t)
	if runtime.GOARCH != "amd64" {
		testkit.Unavailable(t, "the units are compiled for x86-64 here")
	}
	var tools []string
	for _, name := range []string{"clang-19", "bpftool"} {
		p, err := exec.LookPath(name)
		if err != nil {
			testkit.Unavailable(t, "%s not installed (make deps installs it)", name)
		}
		tools = append(tools, p)
	}
	clang, bpftool := tools[0], tools[1]
	inc, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var objs []string
	for _, unit := range []string{"link_one", "link_two"} {
		obj := filepath.Join(dir, unit+".o")
		out, err := exec.Command(clang, "-target", "bpf", "-O2", "-g", "-D__TARGET_ARCH_x86",
			"-I/usr/include/x86_64-linux-gnu", "-I"+inc, "-Wall", "-Werror",
			"-c", filepath.Join("testdata", unit+".c"), "-o", obj).CombinedOutput()
		if err != nil {
			t.Fatalf("clang %s: %v\n%s", unit, err, out)
		}
		objs = append(objs, obj)
	}
	linked := filepath.Join(dir, "linked.o")
	if out, err := exec.Command(bpftool, append([]string{"gen", "object", linked}, objs...)...).CombinedOutput(); err != nil {
		t.Fatalf("bpftool gen object: %v\n%s", err, out)
	}

	spec, err := ebpf.LoadCollectionSpec(linked)
	if err != nil {
		t.Fatal(err)
	}
	if err := usdt.Prepare(spec); err != nil {
		t.Fatal(err)
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		t.Fatal(err)
	}
	defer coll.Close()
	att, err := usdt.NewAttacher(spec, coll)
	if err != nil {
		t.Fatal(err)
	}
	path := testkit.Fixture("usdt_sample")
	fx := testkit.Start(t, path)
	opts := &usdt.Options{PID: fx.PID()}
	for _, a := range []struct{ prog, probe string }{{"one_consts", "consts"}, {"two_loop", "loop"}} {
		l, err := att.Attach(coll.Programs[a.prog], path, "sample", a.probe, opts)
		if err != nil {
			t.Fatalf("%s on sample:%s: %v", a.prog, a.probe, err)
		}
		defer l.Close()
	}
	fx.Fire("consts", 1)
	if err := fx.Loop("loop", 3); err != nil {
		t.Fatal(err)
	}
	for _, m := range []struct {
		name string
		want []int64
	}{
		// sample:consts fires 5, -9, (int8_t)-1, (uint16_t)65535, INT64_MAX.
		{"one_vals", []int64{5, -9, -1, 65535, 0x7fffffffffffffff, 5}},
		// sample:loop's last round, r = 2: r, r+1, -r, (int32_t)r.
		{"two_vals", []int64{2, 3, -2, 2, 4}},
	} {
		for i, want := range m.want {
			var got int64
			if err := coll.Maps[m.name].Lookup(uint32(i), &got); err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("%s[%d] = %d, want %d", m.name, i, got, want)
			}
		}
	}
}
