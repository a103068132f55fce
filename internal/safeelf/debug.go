package safeelf

import (
	"debug/elf"
	"fmt"
	"io"
)

// NewDebugFile is elf.NewFile with its panics turned into errors: debug/elf
// documents that it is not hardened against malicious input and has
// panicked on corrupt files (golang/go#10996, #33121, #47445, #70584). Any
// accessor called later on the result can still panic; wrap such calls
// with Recover.
func NewDebugFile(r io.ReaderAt) (f *elf.File, err error) {
	defer Recover(&err)
	return elf.NewFile(r)
}

// Recover, deferred, turns a panic into an error stored in *err.
func Recover(err *error) {
	if p := recover(); p != nil {
		*err = fmt.Errorf("malformed ELF: debug/elf panicked: %v", p)
	}
}
