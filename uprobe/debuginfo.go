package uprobe

import (
	"github.com/probekit/probekit/debuginfo"
	"github.com/probekit/probekit/internal/safeelf"
)

// debugInfo records the debug file a stripped Binary's .symtab came from.
type debugInfo struct {
	path     string
	warnings []error
}

// functions reads the function table of f, joined with the static
// functions of its debug file when f is stripped (debuginfo.Functions):
// a libc with Debian's libc6-dbg offers _int_malloc. Only local debug
// files are searched (inside the process's root first, for OpenProcess):
// opening a binary never waits for the network.
func (b *Binary) functions(f *safeelf.File) (*safeelf.Funcs, error) {
	if b.target == nil {
		return f.Functions()
	}
	opts := &debuginfo.Options{Process: b.proc, Offline: true, Warn: func(err error) {
		b.debug.warnings = append(b.debug.warnings, err)
	}}
	funcs, path, err := debuginfo.FunctionsFrom(f, b.target.File, b.target.Path, opts)
	b.debug.path = path
	return funcs, err
}

// DebugFile returns the path of the separate debug file whose .symtab
// gave a stripped binary its static functions ("" when the file has its
// own .symtab or no debug file was found), and the candidates refused on
// the way (another build's file, a CRC mismatch), which were not used.
func (b *Binary) DebugFile() (path string, warnings []error) {
	return b.debug.path, b.debug.warnings
}
