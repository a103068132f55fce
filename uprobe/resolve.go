package uprobe

import (
	"cmp"
	"debug/elf"
	"fmt"
	"go/version"
	"strings"

	"github.com/probekit/probekit/attach"
	"github.com/probekit/probekit/internal/glob"
)

// Resolve returns the functions pattern names in b, the one rule every
// caller of the library and the command line shares:
//
//   - a name (name, name@VERSION, name@@VERSION) is the one function
//     Function resolves it to;
//   - a glob (see Functions) gives one Function per address: aliases such
//     as malloc and __libc_malloc share their code, and two probes on one
//     address would fire twice per call. The name kept is the preferred
//     one (a global over a local, a default version over a hidden one,
//     then the shorter name). Two functions of one name at different
//     addresses (static functions of separate files) are both kept.
//
// No match fails with ErrNotFound. The functions are sorted by address.
func (b *Binary) Resolve(pattern string) ([]Function, error) {
	if glob.Literal(pattern) {
		fn, err := b.Function(pattern)
		if err != nil {
			return nil, err
		}
		return []Function{fn}, nil
	}
	all := b.Functions(pattern) // sorted by address
	if len(all) == 0 {
		return nil, fmt.Errorf("uprobe: %s: no function matches %q: %w", b.display, pattern, ErrNotFound)
	}
	out := all[:0]
	for _, fn := range all {
		if n := len(out); n > 0 && out[n-1].Address == fn.Address {
			if preferName(fn, out[n-1]) {
				out[n-1] = fn
			}
			continue
		}
		out = append(out, fn)
	}
	return out, nil
}

// preferName reports whether a names a function better than b: a global
// over a local, a default version over a hidden one, then the shorter
// name (malloc over __libc_malloc), then the first in byte order.
func preferName(a, b Function) bool {
	rank := func(f Function) int {
		r := 0
		if f.Global {
			r += 2
		}
		if f.Version == "" || f.DefaultVersion {
			r++
		}
		return r
	}
	if c := cmp.Compare(rank(a), rank(b)); c != 0 {
		return c > 0
	}
	if len(a.Name) != len(b.Name) {
		return len(a.Name) < len(b.Name)
	}
	return a.String() < b.String()
}

// Convention is how a function receives its arguments.
type Convention uint8

const (
	// ConventionC is the platform's C calling convention: the first
	// integer and pointer arguments in rdi, rsi, rdx, rcx, r8, r9
	// (System V x86-64) or x0-x7 (AAPCS64), the result in rax or x0.
	ConventionC Convention = iota
	// ConventionGo is Go's register ABI (ABIInternal): rax, rbx, rcx,
	// rdi, rsi, r8, r9, r10, r11 on x86-64 (Go 1.17), x0-x15 on arm64
	// (Go 1.18); results in the same registers.
	ConventionGo
	// ConventionGoStack is Go before its register ABI: arguments and
	// results on the stack, so no register holds them.
	ConventionGoStack
)

// goRegisterABI is the first Go release passing arguments in registers
// on each architecture (the Go 1.17 and 1.18 release notes).
var goRegisterABI = map[elf.Machine]string{
	elf.EM_X86_64:  "go1.17",
	elf.EM_AARCH64: "go1.18",
}

// Convention returns how fn, a function of b, receives its arguments: Go
// functions of a Go program (package-qualified names, main.add) follow
// Go's convention of the Go release that built it; C linked in by cgo
// (x_cgo_init, malloc) and every function of other programs follow C's.
func (b *Binary) Convention(fn Function) Convention {
	if !b.IsGo() || !strings.Contains(fn.Name, ".") {
		return ConventionC
	}
	if v, first := b.goVersion, goRegisterABI[b.machine]; v != "" && first != "" && version.IsValid(v) && version.Compare(v, first) < 0 {
		return ConventionGoStack
	}
	return ConventionGo
}

// CheckRegisterArgs fails with ErrStackArgs when b's functions receive
// their arguments on the stack: BPF programs that read arguments from
// registers read 64-bit x86-64 and arm64 registers, and 32-bit programs
// the host runs (i386 on x86-64, arm on arm64) pass arguments on the
// stack.
func (b *Binary) CheckRegisterArgs() error {
	if m := b.machine; m != elf.EM_X86_64 && m != elf.EM_AARCH64 {
		return fmt.Errorf("uprobe: %s is built for %s: %w (function probes read the argument registers of x86-64 and arm64 programs)", b.display, attach.MachineName(m, b.file.ByteOrder), ErrStackArgs)
	}
	return nil
}
