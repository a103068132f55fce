package main

import (
	"debug/elf"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/procmaps"
)

type frameJSON struct {
	Address  string  `json:"address"`
	Function *string `json:"function"`
	Offset   *uint64 `json:"offset"`
	Object   *string `json:"object"`
	File     string  `json:"file"`
	Line     int     `json:"line"`
}

func decodeFrames(t *testing.T, out string) []frameJSON {
	t.Helper()
	var fs []frameJSON
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		var f frameJSON
		if err := json.Unmarshal([]byte(line), &f); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		if f.Function == nil || f.Offset == nil || f.Object == nil {
			t.Fatalf("%q: a field is missing", line)
		}
		fs = append(fs, f)
	}
	return fs
}

func TestSymbolizeFileJSON(t *testing.T) {
	path := testkit.Fixture("usdt_sample")
	code, out, stderr := runCmd("symbolize", "--json", "-e", path, "0x10d5", "14f0", "1")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	fs := decodeFrames(t, out)
	want := []struct {
		addr, fn string
		off      uint64
	}{{"0x10d5", "main", 5}, {"0x14f0", "fire_consts", 0}, {"0x1", "", 0}}
	if len(fs) != len(want) {
		t.Fatalf("%d frames: %s", len(fs), out)
	}
	for i, w := range want {
		f := fs[i]
		if f.Address != w.addr || *f.Function != w.fn || *f.Offset != w.off || *f.Object != path {
			t.Errorf("frame %d: %s", i, strings.Split(out, "\n")[i])
		}
	}
}

// TestSymbolizeStdin: addresses one per line on stdin, human output as
// addr2line -f gives it, one line each (the file given with -e is not
// repeated on each line).
func TestSymbolizeStdin(t *testing.T) {
	symbolizeStdin = strings.NewReader("10d5\n\n0x14f0\n")
	defer func() { symbolizeStdin = os.Stdin }()
	path := testkit.Fixture("usdt_sample")
	code, out, stderr := runCmd("symbolize", "-e", path)
	want := "0x10d5 main+0x5\n0x14f0 fire_consts+0x0\n"
	if code != 0 || out != want {
		t.Fatalf("exit %d: %q, want %q (%s)", code, out, want, stderr)
	}
	symbolizeStdin = strings.NewReader("10d5\nnot-hex\n")
	if code, _, stderr := runCmd("symbolize", "-e", path); code != 1 || !strings.Contains(stderr, "line 2") {
		t.Fatalf("bad stdin line: exit %d, %s", code, stderr)
	}
}

func TestSymbolizeUsage(t *testing.T) {
	path := testkit.Fixture("usdt_sample")
	for _, args := range [][]string{
		{"symbolize", "10d5"},
		{"symbolize", "-e", path, "-p", "1", "10d5"},
		{"symbolize", "-e", path, "xyz"},
		{"symbolize", "-e", path, "0x"},
	} {
		if code, _, _ := runCmd(args...); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
	if code, _, _ := runCmd("symbolize", "-e", "/nonexistent", "1"); code != 1 {
		t.Errorf("missing file: exit %d, want 1", code)
	}
}

// TestSymbolizeGoStripped: file and line of a stripped Go program.
func TestSymbolizeGoStripped(t *testing.T) {
	code, out, stderr := runCmd("symbolize", "--json", "-e", testkit.Fixture("goprog_stripped"), "4add80")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	vaddr, _ := testkit.SymbolOffset(t, testkit.Fixture("goprog"), "main.add")
	if vaddr != 0x4add80 {
		t.Skipf("goprog rebuilt: main.add at %#x", vaddr)
	}
	f := decodeFrames(t, out)[0]
	if *f.Function != "main.add" || !strings.HasSuffix(f.File, "main.go") || f.Line == 0 {
		t.Fatalf("%s", out)
	}
}

// TestSymbolizeProcess: runtime addresses of a live PIE and its shared
// library, computed from its maps.
func TestSymbolizeProcess(t *testing.T) {
	exe, err := filepath.Abs(testkit.Fixture("usdt_lib_user"))
	if err != nil {
		t.Fatal(err)
	}
	lib, _ := filepath.Abs(testkit.Fixture("libusdt_lib.so"))
	fx := testkit.Start(t, exe)
	pp, err := procmaps.Open(fx.PID())
	if err != nil {
		t.Fatal(err)
	}
	addrOf := func(path, name string) uint64 {
		_, off := testkit.SymbolOffset(t, path, name)
		obj, err := pp.Object(idOf(t, path))
		if err != nil {
			t.Fatal(err)
		}
		a, err := obj.Address(off, procmaps.Exec)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	a, b := addrOf(exe, "main")+7, addrOf(lib, "usdt_lib_fire_shared")
	code, out, stderr := runCmd("symbolize", "--json", "-p", strconv.Itoa(fx.PID()),
		strconv.FormatUint(a, 16), "0x"+strconv.FormatUint(b, 16))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	fs := decodeFrames(t, out)
	if *fs[0].Function != "main" || *fs[0].Offset != 7 || *fs[0].Object != exe ||
		*fs[1].Function != "usdt_lib_fire_shared" || *fs[1].Offset != 0 || *fs[1].Object != lib {
		t.Fatalf("%s", out)
	}
	fx.Kill()
	if code, _, stderr := runCmd("symbolize", "-p", strconv.Itoa(fx.PID()), "1"); code != 1 || !strings.Contains(stderr, "gone") {
		t.Fatalf("exited process: exit %d, %s", code, stderr)
	}
}

func idOf(t *testing.T, path string) procmaps.FileID {
	t.Helper()
	id, err := procmaps.IDOf(path)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

const libjvmPath = "/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so"

// libjvmAddrs returns n addresses inside random functions nm lists in
// libjvm.so, with the names nm gives the functions holding them.
func libjvmAddrs(tb testing.TB, n int) (addrs []string, want []map[string]uint64) {
	if _, err := os.Stat(libjvmPath); err != nil {
		testkit.Unavailable(tb, "no libjvm: %v", err)
	}
	out, err := exec.Command("nm", "-S", "--defined-only", libjvmPath).Output()
	if err != nil {
		testkit.Unavailable(tb, "nm: %v", err)
	}
	type fn struct {
		addr, size uint64
		name       string
	}
	var fns []fn
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.SplitN(line, " ", 4)
		if len(f) == 4 && strings.Contains("TtWw", f[2]) {
			a, _ := strconv.ParseUint(f[0], 16, 64)
			s, _ := strconv.ParseUint(f[1], 16, 64)
			if s > 0 {
				fns = append(fns, fn{a, s, f[3]})
			}
		}
	}
	rng := rand.New(rand.NewPCG(7, 8))
	for range n {
		f := fns[rng.IntN(len(fns))]
		a := f.addr + rng.Uint64N(f.size)
		// Every function nm lists that holds a; the innermost (highest
		// address) is the answer, under any of its names.
		w := map[string]uint64{}
		best := uint64(0)
		for _, g := range fns {
			if g.addr <= a && a < g.addr+g.size && g.addr >= best {
				if g.addr > best {
					clear(w)
					best = g.addr
				}
				w[g.name] = a - g.addr
			}
		}
		addrs = append(addrs, strconv.FormatUint(a, 16))
		want = append(want, w)
	}
	return addrs, want
}

// TestSymbolizeAgreesWithNm: the command names what nm names, on 2,000
// random addresses of libjvm.so.
func TestSymbolizeAgreesWithNm(t *testing.T) {
	addrs, want := libjvmAddrs(t, 2000)
	code, out, stderr := runCmd(append([]string{"symbolize", "--json", "-e", libjvmPath}, addrs...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for i, f := range decodeFrames(t, out) {
		if off, ok := want[i][*f.Function]; !ok || off != *f.Offset {
			t.Fatalf("%s: %s+%#x, nm says %v", addrs[i], *f.Function, *f.Offset, want[i])
		}
	}
}

// BenchmarkSymbolizeCommand: the whole command over 10,000 libjvm
// addresses, as `probekit symbolize -e libjvm.so ADDR...` runs it (without
// the process start), per command.
func BenchmarkSymbolizeCommand(b *testing.B) {
	addrs, _ := libjvmAddrs(b, 10000)
	args := append([]string{"symbolize", "-e", libjvmPath}, addrs...)
	b.ReportAllocs()
	for b.Loop() {
		if code, _, stderr := runCmd(args...); code != 0 {
			b.Fatal(stderr)
		}
	}
}

// TestSymbolizeLibraryName: -e takes a library name as list and trace
// do (it took only a path): libc.so.6 names an address as the path
// that name resolves to does.
func TestSymbolizeLibraryName(t *testing.T) {
	path, err := procmaps.Resolve("libc.so.6")
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	syms, err := f.DynamicSymbols()
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	var addr uint64
	for _, s := range syms {
		if s.Name == "getpid" {
			addr = s.Value + 1
		}
	}
	if addr == 0 {
		t.Fatalf("no getpid in %s", path)
	}
	a := fmt.Sprintf("%#x", addr)
	code, byName, stderr := runCmd("symbolize", "--no-cache", "-e", "libc.so.6", a)
	if code != 0 {
		t.Fatalf("-e libc.so.6: exit %d: %s", code, stderr)
	}
	_, byPath, _ := runCmd("symbolize", "--no-cache", "-e", path, a)
	if byName != byPath || !strings.Contains(byName, "getpid") {
		t.Errorf("-e libc.so.6: %q; -e %s: %q", byName, path, byPath)
	}
}
