package testkit

import (
	"encoding/binary"
	"fmt"
	"os"
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
