package testkit

import (
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
)

// ReadUint16 reads the 2-byte native-endian value at addr in the memory of
// process pid (a USDT semaphore counter).
func ReadUint16(pid int, addr uint64) (uint16, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var b [2]byte
	if _, err := f.ReadAt(b[:], int64(addr)); err != nil {
		return 0, fmt.Errorf("read pid %d at %#x: %w", pid, addr, err)
	}
	return binary.NativeEndian.Uint16(b[:]), nil
}

// HeapGrowth runs fn and returns how many bytes it allocated in total,
// for tests that bound what a parser allocates for a hostile input.
func HeapGrowth(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}
