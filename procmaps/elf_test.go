package procmaps

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"testing"
)

// This file finds addresses in fixtures with debug/elf only, so the
// tests do not depend on the usdt note parser.

// symbolOffset returns the file offset of symbol name in the ELF file at
// path: its value translated through the PT_LOAD that contains it.
func symbolOffset(t testing.TB, path, name string) (vaddr, off uint64) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		syms, err = f.DynamicSymbols()
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range syms {
		if s.Name == name {
			return s.Value, vaddrToOffset(t, f, s.Value)
		}
	}
	t.Fatalf("%s: no symbol %s", path, name)
	return 0, 0
}

func vaddrToOffset(t testing.TB, f *elf.File, vaddr uint64) uint64 {
	t.Helper()
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && vaddr >= p.Vaddr && vaddr < p.Vaddr+p.Filesz {
			return vaddr - p.Vaddr + p.Off
		}
	}
	t.Fatalf("vaddr %#x in no PT_LOAD", vaddr)
	return 0
}

// stapsdtSemaphore returns the semaphore vaddr and file offset of USDT
// provider:name in the ELF file at path (x86-64 notes only).
func stapsdtSemaphore(t testing.TB, path, provider, name string) (vaddr, off uint64) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sec := f.Section(".note.stapsdt")
	if sec == nil {
		t.Fatalf("%s: no .note.stapsdt", path)
	}
	data, err := sec.Data()
	if err != nil {
		t.Fatal(err)
	}
	align4 := func(n uint32) int { return int((n + 3) &^ 3) }
	for len(data) >= 12 {
		namesz := binary.LittleEndian.Uint32(data[0:])
		descsz := binary.LittleEndian.Uint32(data[4:])
		typ := binary.LittleEndian.Uint32(data[8:])
		data = data[12:]
		if align4(namesz)+align4(descsz) > len(data) {
			break
		}
		owner := data[:namesz]
		desc := data[align4(namesz) : align4(namesz)+int(descsz)]
		data = data[align4(namesz)+align4(descsz):]
		if typ != 3 || string(owner) != "stapsdt\x00" || len(desc) < 27 {
			continue
		}
		sema := binary.LittleEndian.Uint64(desc[16:])
		strs := bytes.SplitN(desc[24:], []byte{0}, 3)
		if len(strs) == 3 && string(strs[0]) == provider && string(strs[1]) == name && sema != 0 {
			return sema, vaddrToOffset(t, f, sema)
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
