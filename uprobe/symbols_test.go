package uprobe

import (
	"bytes"
	"debug/elf"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/procmaps"
)

func TestMain(m *testing.M) { os.Exit(testkit.RunWithLeakCheck(m)) }

const (
	goprog         = "../testdata/bin/goprog"
	goprogStripped = "../testdata/bin/goprog_stripped"
	goprogARM64    = "../testdata/bin/goprog_arm64"
	mallocUser     = "../testdata/bin/malloc_user"
	libc           = "/usr/lib/x86_64-linux-gnu/libc.so.6"
	libstdcxx      = "/usr/lib/x86_64-linux-gnu/libstdc++.so.6"
)

func mustOpen(tb testing.TB, path string) *Binary {
	tb.Helper()
	b, err := Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { b.Close() })
	return b
}

func needFile(tb testing.TB, path string) {
	tb.Helper()
	if _, err := os.Stat(path); err != nil {
		testkit.Unavailable(tb, "%s: %v", path, err)
	}
}

// sectionBytes reads n bytes at vaddr through the section headers, a path
// independent of the PT_LOAD translation under test.
func sectionBytes(tb testing.TB, path string, vaddr uint64, n int) []byte {
	tb.Helper()
	f, err := elf.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	for _, s := range f.Sections {
		if s.Type == elf.SHT_PROGBITS && vaddr >= s.Addr && vaddr+uint64(n) <= s.Addr+s.Size {
			buf := make([]byte, n)
			if _, err := s.ReadAt(buf, int64(vaddr-s.Addr)); err != nil {
				tb.Fatal(err)
			}
			return buf
		}
	}
	tb.Fatalf("%s: no section holds %#x", path, vaddr)
	return nil
}

// checkOffset asserts that fn.Offset holds the bytes the sections put at
// fn.Address.
func checkOffset(tb testing.TB, b *Binary, path string, fn Function) {
	tb.Helper()
	const n = 16
	want := sectionBytes(tb, path, fn.Address, n)
	got, err := b.readCode(fn.Offset, n)
	if err != nil {
		tb.Fatal(err)
	}
	if string(got) != string(want) {
		tb.Errorf("%s: bytes at file offset %#x = % x, section bytes at %#x = % x", fn, fn.Offset, got, fn.Address, want)
	}
}

func TestGoFixtureSymbols(t *testing.T) {
	full := mustOpen(t, goprog)
	stripped := mustOpen(t, goprogStripped)
	for _, b := range []*Binary{full, stripped} {
		if !b.IsGo() || !strings.HasPrefix(b.GoVersion(), "go1.") {
			t.Errorf("%s: GoVersion = %q, want a go1.x version", b.Path(), b.GoVersion())
		}
		if b.Machine() != elf.EM_X86_64 {
			t.Errorf("%s: machine %s", b.Path(), b.Machine())
		}
	}
	for _, name := range []string{"main.add", "main.classify", "main.pair", "main.recurse", "main.main"} {
		f1, err := full.Function(name)
		if err != nil {
			t.Fatal(err)
		}
		f2, err := stripped.Function(name)
		if err != nil {
			t.Fatal(err)
		}
		if f1.Source != SymbolTable || f2.Source != GoPCLNTab {
			t.Errorf("%s: sources %s, %s", name, f1.Source, f2.Source)
		}
		// -s -w leaves the code where it was: same address and offset.
		if f1.Address != f2.Address || f1.Offset != f2.Offset {
			t.Errorf("%s: symtab %#x/%#x, pclntab %#x/%#x", name, f1.Address, f1.Offset, f2.Address, f2.Offset)
		}
		// pclntab sizes run to the next function, padding included.
		if f1.Size == 0 || f2.Size < f1.Size || f2.Size-f1.Size >= 64 {
			t.Errorf("%s: symtab size %d, pclntab size %d", name, f1.Size, f2.Size)
		}
		checkOffset(t, full, goprog, f1)
		checkOffset(t, stripped, goprogStripped, f2)
	}
	got := names(stripped.Functions("main.*"))
	for _, want := range []string{"main.add", "main.classify", "main.main", "main.pair", "main.recurse", "main.run"} {
		if !strings.Contains(got, want+" ") {
			t.Errorf("Functions(main.*) = %s, missing %s", got, want)
		}
	}
	if n := len(stripped.Functions("")); n < 1000 {
		t.Errorf("stripped fixture lists %d functions, want the whole runtime", n)
	}
}

func names(fns []Function) string {
	var sb strings.Builder
	for _, f := range fns {
		sb.WriteString(f.String() + " ")
	}
	return sb.String()
}

// TestGoBuildModes builds the fixture as PIE and with cgo (external
// linking), stripped and not, and checks that .gopclntab gives the
// addresses .symtab gives: the text start of those binaries is not .text.
func TestGoBuildModes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds Go programs")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		testkit.Unavailable(t, "go toolchain: %v", err)
	}
	src, _ := filepath.Abs("../testdata/goprog/main.go")
	cgoSrc := filepath.Join(t.TempDir(), "cgo.go")
	body, _ := os.ReadFile(src)
	// A cgo variant: C code lands before runtime.text in .text.
	cgoBody := strings.Replace(string(body), "import (", "// static int twice(int x) { return 2 * x; }\nimport \"C\"\n\nimport (", 1)
	cgoBody = strings.Replace(cgoBody, "func main() {", "func main() {\n\t_ = C.twice(1)", 1)
	if err := os.WriteFile(cgoSrc, []byte(cgoBody), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, src string
		cgo       bool
		flags     []string
	}{
		{"pie", src, false, []string{"-buildmode=pie"}},
		{"cgo", cgoSrc, true, nil},
		{"cgo-pie", cgoSrc, true, []string{"-buildmode=pie"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.cgo {
				if _, err := exec.LookPath("gcc"); err != nil {
					testkit.Unavailable(t, "cgo needs gcc: %v", err)
				}
			}
			dir := t.TempDir()
			build := func(out string, extra ...string) string {
				p := filepath.Join(dir, out)
				args := append([]string{"build", "-trimpath", "-buildvcs=false", "-o", p}, tc.flags...)
				args = append(append(args, extra...), tc.src)
				cmd := exec.Command(gobin, args...)
				cmd.Dir = filepath.Dir(src)
				cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
				if tc.cgo {
					cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
				}
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("go %v: %v\n%s", args, err, out)
				}
				return p
			}
			fullPath := build("full", "-ldflags=-w")
			strippedPath := build("stripped", "-ldflags=-s -w")
			full, stripped := mustOpen(t, fullPath), mustOpen(t, strippedPath)
			for _, name := range []string{"main.add", "main.classify", "main.recurse", "runtime.main"} {
				f1, err := full.Function(name)
				if err != nil {
					t.Fatal(err)
				}
				f2, err := stripped.Function(name)
				if err != nil {
					t.Fatal(err)
				}
				if f2.Source != GoPCLNTab {
					t.Errorf("%s: stripped source %s", name, f2.Source)
				}
				// External linking may lay out the stripped build
				// differently, so compare each with its own sections.
				checkOffset(t, full, fullPath, f1)
				checkOffset(t, stripped, strippedPath, f2)
				if !tc.cgo && (f1.Address != f2.Address || f1.Offset != f2.Offset) {
					t.Errorf("%s: symtab %#x/%#x, pclntab %#x/%#x", name, f1.Address, f1.Offset, f2.Address, f2.Offset)
				}
			}
		})
	}
}

func TestLibcSymbols(t *testing.T) {
	needFile(t, libc)
	b := mustOpen(t, libc)
	if b.IsGo() {
		t.Fatal("libc detected as Go")
	}
	m, err := b.Function("malloc")
	if err != nil {
		t.Fatal(err)
	}
	if m.Version != "GLIBC_2.2.5" || !m.DefaultVersion || m.Size == 0 {
		t.Errorf("malloc = %+v", m)
	}
	checkOffset(t, b, libc, m)
	for _, name := range []string{"malloc@@GLIBC_2.2.5", "malloc@GLIBC_2.2.5"} {
		got, err := b.Function(name)
		if err != nil || got.Address != m.Address {
			t.Errorf("Function(%q) = %+v, %v; want malloc at %#x", name, got, err, m.Address)
		}
	}
	if _, err := b.Function("malloc@@GLIBC_9.9"); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown version: %v", err)
	}
	// realpath has a default and a compat version at other addresses.
	def, err := b.Function("realpath")
	if err != nil {
		t.Fatal(err)
	}
	old, err := b.Function("realpath@GLIBC_2.2.5")
	if err != nil {
		t.Fatal(err)
	}
	if def.Version != "GLIBC_2.3" || !def.DefaultVersion || old.DefaultVersion || def.Address == old.Address {
		t.Errorf("realpath = %s at %#x, compat %s at %#x", def, def.Address, old, old.Address)
	}

	for _, tc := range []struct {
		name string
		err  error
	}{
		{"no_such_function_xyz", ErrNotFound},
		{"stdout", ErrNotFunction},
		{"strcpy", ErrNotFunction},  // IFUNC
		{"memcpy", ErrNotFunction},  // default is an IFUNC, only the compat version is a FUNC
		{"memcpy@GLIBC_2.2.5", nil}, // which can be named
		{"memcpy@@GLIBC_2.2.5", ErrNotFound},
	} {
		_, err := b.Function(tc.name)
		if !errors.Is(err, tc.err) {
			t.Errorf("Function(%q) = %v, want %v", tc.name, err, tc.err)
			continue
		}
		if err != nil && (!strings.Contains(err.Error(), tc.name) || !strings.Contains(err.Error(), libc)) {
			t.Errorf("error %q does not name the symbol and the file", err)
		}
	}

	got := names(b.Functions("mall*"))
	if !strings.Contains(got, "malloc ") && !strings.Contains(got, "malloc@@GLIBC_2.2.5 ") {
		t.Errorf("Functions(mall*) = %s", got)
	}
	if got := b.Functions("malloc@@GLIBC_2.2.?"); len(got) != 1 || got[0].Name != "malloc" {
		t.Errorf("Functions(malloc@@GLIBC_2.2.?) = %s", names(got))
	}
}

func TestCXXMangled(t *testing.T) {
	needFile(t, libstdcxx)
	b := mustOpen(t, libstdcxx)
	fn, err := b.Function("_ZSt9terminatev") // std::terminate()
	if err != nil {
		t.Fatal(err)
	}
	checkOffset(t, b, libstdcxx, fn)
	all := b.Functions("_ZNSt6locale*")
	if len(all) < 5 {
		t.Fatalf("Functions(_ZNSt6locale*) = %d functions", len(all))
	}
	for _, f := range all {
		if !strings.HasPrefix(f.Name, "_ZNSt6locale") {
			t.Errorf("glob matched %s", f)
		}
	}
}

func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	notELF := filepath.Join(dir, "text")
	if err := os.WriteFile(notELF, []byte("#!/bin/sh\necho hello\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(notELF); err == nil || !strings.Contains(err.Error(), notELF) {
		t.Errorf("Open(not ELF) = %v", err)
	}
	if _, err := Open(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Open(missing) = %v", err)
	}
	if _, err := Open(dir); err == nil {
		t.Error("Open(directory) succeeded")
	}
	if _, err := OpenProcess(processOf(t, os.Getpid()), "relative/path"); err == nil {
		t.Error("OpenProcess(relative) succeeded")
	}

	b := mustOpen(t, goprog)
	_, err := b.Function("add")
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "main.add") {
		t.Errorf("Function(add) on Go = %v, want ErrNotFound with a main.add hint", err)
	}
	_, err = b.Function("main.sink")
	if !errors.Is(err, ErrNotFunction) {
		t.Errorf("Function(main.sink) = %v, want ErrNotFunction", err)
	}
	add, err := b.Function("main.add")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.insideOffset(add, add.Size); err == nil || !strings.Contains(err.Error(), "outside") {
		t.Errorf("offset past the end: %v", err)
	}
	if _, err := b.insideOffset(add, 1); !errors.Is(err, ErrUncertainSite) {
		t.Errorf("offset 1 into main.add (mid-instruction): %v", err)
	}
	if off, err := b.insideOffset(add, 3); err != nil || off != add.Offset+3 {
		t.Errorf("offset 3 into main.add (the RET) = %#x, %v", off, err)
	}
}

func TestOpenProcess(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := OpenProcess(processOf(t, os.Getpid()), exe)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.Path() != exe || !b.IsGo() || b.pid != os.Getpid() {
		t.Errorf("OpenProcess = %s, go %q", b, b.GoVersion())
	}
	if _, err := b.Function("github.com/probekit/probekit/uprobe.TestOpenProcess"); err != nil {
		t.Error(err)
	}
}

// BenchmarkOpenLarge: opening the symbols of large binaries (Node's ~107k
// .symtab entries, libjvm.so's C++ symbols), what every probe and every
// listing pays first.
func BenchmarkOpenLarge(b *testing.B) {
	for _, path := range []string{
		"/usr/bin/node",
		"/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so",
		"/usr/lib/x86_64-linux-gnu/libnode.so.108",
	} {
		b.Run(filepath.Base(path), func(b *testing.B) {
			if _, err := os.Stat(path); err != nil {
				b.Skipf("%s absent: %v", path, err)
			}
			b.ReportAllocs()
			for b.Loop() {
				bin, err := Open(path)
				if err != nil {
					b.Fatal(err)
				}
				if bin.funcs.Len() == 0 {
					b.Fatal("no functions")
				}
				bin.Close()
			}
		})
	}
}

func BenchmarkResolve(b *testing.B) {
	path := "/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so"
	if _, err := os.Stat(path); err != nil {
		b.Skip(err)
	}
	bin := mustOpen(b, path)
	b.Run("Function", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := bin.Function("JVM_GC"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("FunctionAt", func(b *testing.B) {
		fn, err := bin.Function("JVM_GC")
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := bin.FunctionAt(fn.Address + 1); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Functions-glob", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if len(bin.Functions("JVM_*")) == 0 {
				b.Fatal("no match")
			}
		}
	})
}

// FuzzParse feeds hostile ELF files to the parser: no panic, and every
// function it returns lies in an executable segment.
func FuzzParse(f *testing.F) {
	// Whole small fixtures (a Go binary is too large for the mutator to
	// make progress; its first pages carry the headers).
	for _, path := range []string{mallocUser, "../testdata/bin/usdt_sample_aarch64", goprogStripped} {
		if data, err := os.ReadFile(path); err == nil {
			f.Add(data[:min(len(data), 32<<10)])
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		b := &Binary{display: "fuzz"}
		if err := b.parse(bytes.NewReader(data)); err != nil {
			return
		}
		for _, fn := range b.Functions("") {
			if off, ok := b.fileOffset(fn.Address); !ok || off != fn.Offset {
				t.Fatalf("%s: offset %#x, translation %#x %v", fn, fn.Offset, off, ok)
			}
			_, _ = b.Function(fn.String())
			_, _ = b.Function(fn.Name)
			if at, err := b.FunctionAt(fn.Address); err != nil || at.Address != fn.Address {
				t.Fatalf("FunctionAt(%#x) = %s, %v", fn.Address, at, err)
			}
			if fn.Size > 0 {
				_, _ = b.readCode(fn.Offset, min(fn.Size, 64))
			}
		}
		_ = b.Functions("*@*")
		_, _ = b.Function("no_such_function")
	})
}

// TestNodeLibuv lists Node's exported libuv functions by glob.
func TestNodeLibuv(t *testing.T) {
	const node = "/usr/bin/node"
	if _, err := os.Stat(node); err != nil {
		t.Skip("node not installed")
	}
	b := mustOpen(t, node)
	fns := b.Functions("uv_fs_*")
	if len(fns) < 10 {
		t.Fatalf("Functions(uv_fs_*) = %d functions", len(fns))
	}
	for _, fn := range fns {
		if !strings.HasPrefix(fn.Name, "uv_fs_") || fn.Size == 0 {
			t.Errorf("%s size %d", fn, fn.Size)
		}
	}
	open, err := b.Function("uv_fs_open")
	if err != nil {
		t.Fatal(err)
	}
	checkOffset(t, b, node, open)
}

// TestFunctionAt: the function holding an address, for symbolizing.
func TestFunctionAt(t *testing.T) {
	for _, path := range []string{goprog, goprogStripped, mallocUser} {
		b := mustOpen(t, path)
		for _, fn := range b.Functions("") {
			if fn.Size == 0 {
				continue
			}
			for _, addr := range []uint64{fn.Address, fn.Address + fn.Size/2, fn.Address + fn.Size - 1} {
				got, err := b.FunctionAt(addr)
				if err != nil || got.Address > addr || addr-got.Address >= max(got.Size, 1) {
					t.Fatalf("%s: FunctionAt(%#x) in %s = %s at %#x size %d, %v", path, addr, fn, got, got.Address, got.Size, err)
				}
			}
		}
		if _, err := b.FunctionAt(0); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: FunctionAt(0) = %v", path, err)
		}
	}
	b := mustOpen(t, goprog)
	add, err := b.Function("main.add")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := b.FunctionAt(add.Address + 1); err != nil || got.Name != "main.add" {
		t.Errorf("FunctionAt(main.add+1) = %s, %v", got, err)
	}
}

// TestOpenTargets: Open takes what procmaps.OpenTarget takes, keeps the
// file open for the kernel, refuses special files at once, and Close is
// idempotent.
func TestOpenTargets(t *testing.T) {
	needFile(t, libc)
	b := mustOpen(t, "libc.so.6")
	if b.Path() != "libc.so.6" || !strings.HasPrefix(b.path, "/proc/self/fd/") || b.target == nil || b.proc != nil {
		t.Errorf("Open(libc.so.6): display %q, path %q", b.Path(), b.path)
	}
	m, err := b.Function("malloc")
	if err != nil {
		t.Fatal(err)
	}
	checkOffset(t, b, libc, m)

	if p, err := exec.LookPath("true"); err == nil {
		tb := mustOpen(t, "true")
		if _, err := tb.Function("main"); err != nil && !errors.Is(err, ErrNotFound) {
			t.Errorf("Open(true) from %s: %v", p, err)
		}
	}

	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := Open(fifo)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, procmaps.ErrNotRegular) || !strings.Contains(err.Error(), fifo) {
			t.Errorf("Open(FIFO) = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Open(FIFO) blocked")
	}

	c, err := Open(goprog)
	if err != nil {
		t.Fatal(err)
	}
	add, err := c.Function("main.add")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := c.readCode(add.Offset, add.Size); err == nil {
		t.Error("code read after Close")
	}
	if fn, err := c.Function("main.add"); err != nil || fn.Name != "main.add" {
		t.Errorf("Function after Close = %s, %v", fn, err)
	}
}

// TestOpenProcessNames: a process target by the base name of an object it
// maps and by a path inside its root.
func TestOpenProcessNames(t *testing.T) {
	fx := testkit.Start(t, mallocUser)
	for _, name := range []string{"libc.so.6", "malloc_user"} {
		b, err := OpenProcess(processOf(t, fx.PID()), name)
		if err != nil {
			t.Fatal(err)
		}
		if b.pid != fx.PID() || b.proc == nil || b.proc.PID != fx.PID() || b.Path() != name {
			t.Errorf("OpenProcess(%s) = %s", name, b)
		}
		if _, err := b.Function("malloc"); err != nil && !errors.Is(err, ErrNotFound) {
			t.Errorf("%s: %v", name, err)
		}
		b.Close()
	}
	if _, err := OpenProcess(processOf(t, fx.PID()), "no_such_library.so.9"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("OpenProcess(missing) = %v", err)
	}
	if _, err := OpenProcess(nil, "libc.so.6"); err == nil {
		t.Error("OpenProcess(nil) succeeded")
	}
}

// processOf opens the identity of pid, failing the test if it is gone.
func processOf(tb testing.TB, pid int) *procmaps.Process {
	tb.Helper()
	p, err := procmaps.Open(pid)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}
