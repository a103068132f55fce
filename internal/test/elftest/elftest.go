// Package elftest opens ELF files for tests through probekit's hardened
// reader. It is apart from testkit because safeelf's own tests import
// testkit.
package elftest

import (
	"bytes"
	"os"
	"testing"

	"github.com/probekit/probekit/internal/safeelf"
)

// Open reads the ELF file at path whole and parses it, failing tb on an
// error.
func Open(tb testing.TB, path string) *safeelf.File {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	f, err := safeelf.NewFile(bytes.NewReader(b))
	if err != nil {
		tb.Fatal(err)
	}
	return f
}
