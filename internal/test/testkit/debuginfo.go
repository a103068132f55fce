package testkit

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Libc is the host's libc, the one libc6-dbg's debug file belongs to.
const Libc = "/lib/x86_64-linux-gnu/libc.so.6"

// FunctionValue returns st_value of the STT_FUNC symbol name in the
// .symtab of the ELF file at path (a separate debug file's too), read
// with debug/elf.
func FunctionValue(tb testing.TB, path, name string) uint64 {
	tb.Helper()
	f, syms := openSymbols(tb, path, false)
	defer f.Close()
	for _, s := range syms {
		if s.Name == name && elf.ST_TYPE(s.Info) == elf.STT_FUNC {
			return s.Value
		}
	}
	tb.Fatalf("%s: no function %s", path, name)
	return 0
}

// BuildID returns the build ID of the ELF file at path in lowercase hex,
// as readelf -n prints it; the test fails when it has none.
func BuildID(tb testing.TB, path string) string {
	tb.Helper()
	out, err := exec.Command("readelf", "-n", path).Output()
	if err != nil {
		tb.Fatalf("readelf -n %s: %v", path, err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if _, id, ok := strings.Cut(line, "Build ID: "); ok {
			return strings.TrimSpace(id)
		}
	}
	tb.Fatalf("%s: no build ID", path)
	return ""
}

// LibcDebugFile returns where libc6-dbg installs Libc's debug file (by
// its build ID under /usr/lib/debug); the test is Unavailable without
// it.
func LibcDebugFile(tb testing.TB) string {
	tb.Helper()
	id := BuildID(tb, Libc)
	path := filepath.Join("/usr/lib/debug/.build-id", id[:2], id[2:]+".debug")
	if _, err := os.Stat(path); err != nil {
		Unavailable(tb, "libc6-dbg not installed (make deps): %v", err)
	}
	return path
}
