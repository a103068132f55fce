package debuginfo

import (
	"testing"

	"github.com/probekit/probekit/internal/safeelf"
	"github.com/probekit/probekit/internal/test/testkit"
)

// BenchmarkLibcFunctions: the function table of the stripped libc, alone
// and joined with its libc6-dbg debug file (found by build ID): the cost
// uprobe.Open pays for libc's static functions.
func BenchmarkLibcFunctions(b *testing.B) {
	testkit.LibcDebugFile(b)
	f := open(b, testkit.Libc)
	ef, err := safeelf.NewFile(f)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("own", func(b *testing.B) {
		for b.Loop() {
			if _, err := ef.Functions(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("with-debug-file", func(b *testing.B) {
		for b.Loop() {
			funcs, err := Functions(ef, f, testkit.Libc, &Options{Offline: true})
			if err != nil || !funcs.SymtabFromDebug {
				b.Fatal(err)
			}
		}
	})
}
