package procmaps

import (
	"fmt"
	"os"
	"testing"

	"github.com/probekit/probekit/internal/test/testkit"
)

// Addresses in fixtures come from testkit's debug/elf readers, so the
// tests do not depend on the usdt note parser.

// symbolOffset returns the link-time address and file offset of symbol
// name in the ELF file at path.
func symbolOffset(t testing.TB, path, name string) (vaddr, off uint64) {
	t.Helper()
	return testkit.SymbolOffset(t, path, name)
}

// stapsdtSemaphore returns the semaphore vaddr and file offset of USDT
// provider:name in the ELF file at path.
func stapsdtSemaphore(t testing.TB, path, provider, name string) (vaddr, off uint64) {
	t.Helper()
	notes, f := testkit.Notes(t, path)
	for _, n := range notes {
		if n.Provider == provider && n.Name == name && n.Semaphore != 0 {
			return n.Semaphore, testkit.FileOffset(t, f, n.Semaphore)
		}
	}
	t.Fatalf("%s: no probe %s:%s with a semaphore", path, provider, name)
	return 0, 0
}

// readMem reads n bytes at addr of process pid.
func readMem(t testing.TB, pid int, addr uint64, n int) []byte {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, int64(addr)); err != nil {
		t.Fatalf("read pid %d at %#x: %v", pid, addr, err)
	}
	return b
}

// writeMem writes b at addr of process pid.
func writeMem(t testing.TB, pid int, addr uint64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(fmt.Sprintf("/proc/%d/mem", pid), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, int64(addr)); err != nil {
		t.Fatalf("write pid %d at %#x: %v", pid, addr, err)
	}
}

// readFileAt reads n bytes at off of the file at path.
func readFileAt(t testing.TB, path string, off uint64, n int) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, int64(off)); err != nil {
		t.Fatal(err)
	}
	return b
}
