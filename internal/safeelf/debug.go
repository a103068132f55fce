package safeelf

import "fmt"

// Recover, deferred, turns a panic into an error stored in *err: a second
// line of defence around parsers of hostile files, and around debug/gosym,
// which documents no hardening against malicious input.
func Recover(err *error) {
	if p := recover(); p != nil {
		*err = fmt.Errorf("malformed ELF: parser panicked: %v", p)
	}
}
