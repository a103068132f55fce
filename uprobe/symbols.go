package uprobe

import (
	"debug/elf"
	"fmt"
	"iter"
	"slices"
	"strings"

	"github.com/probekit/probekit/internal/safeelf"
)

// Source says which table a function came from.
type Source uint8

const (
	// SymbolTable is .symtab (removed by strip).
	SymbolTable Source = Source(safeelf.SourceSymtab)
	// DynamicSymbols is .dynsym (exported symbols, with versions).
	DynamicSymbols Source = Source(safeelf.SourceDynsym)
	// GoPCLNTab is the Go runtime's function table, kept by -s -w.
	GoPCLNTab Source = Source(safeelf.SourcePCLNTab)
)

// String is the table's section name, ".symtab".
func (s Source) String() string { return safeelf.Source(s).String() }

// Function is a function of a Binary.
type Function struct {
	// Name as in the symbol table: mangled for C++ (_ZN2v88internal...),
	// package-qualified for Go (main.add), without any version.
	Name string
	// Version is the symbol version of a .dynsym entry (GLIBC_2.2.5), ""
	// when it has none.
	Version string
	// DefaultVersion is true for name@@VERSION (the version a new link
	// binds to) and false for a hidden name@VERSION.
	DefaultVersion bool
	// Address is the link-time virtual address (st_value, or the pclntab
	// entry PC).
	Address uint64
	// Offset is the file offset of the first instruction: what the kernel
	// takes for a uprobe.
	Offset uint64
	// Size in bytes; 0 when the symbol table does not say (then return
	// sites cannot be found).
	Size uint64
	// Global is true for STB_GLOBAL and STB_WEAK bindings.
	Global bool
	// Source is the table the function was read from.
	Source Source
}

// String returns name, name@VERSION or name@@VERSION.
func (f Function) String() string {
	switch {
	case f.Version == "":
		return f.Name
	case f.DefaultVersion:
		return f.Name + "@@" + f.Version
	default:
		return f.Name + "@" + f.Version
	}
}

// function converts function i of the index.
func (b *Binary) function(i int) Function {
	f := b.funcs.Func(i)
	return Function{
		Name: f.Name, Version: f.Version, DefaultVersion: f.Version != "" && !f.VersionHidden,
		Address: f.Address, Offset: f.Offset, Size: f.Size, Global: f.Global, Source: Source(f.Source),
	}
}

// Functions returns the functions whose name matches glob, sorted by
// address. In glob, '*' matches any run of characters (including '/' and
// '.', which Go and C++ names contain), '?' one character, '\' escapes the
// next one; '[' is literal, since C++ names contain it. A glob with '@'
// is matched against name@VERSION / name@@VERSION. "" or "*" lists all.
// Names share the bytes of the file's string tables: listing every
// function of a large binary allocates the slice and nothing per name.
func (b *Binary) Functions(glob string) []Function {
	return slices.Collect(b.FunctionsSeq(glob))
}

// FunctionsSeq yields what Functions returns, one function at a time,
// without the slice: listing the 86k functions of Node costs no memory
// beyond the file's tables.
func (b *Binary) FunctionsSeq(glob string) iter.Seq[Function] {
	return func(yield func(Function) bool) {
		b.funcs.Match(glob, func(i int) bool { return yield(b.function(i)) })
	}
}

// FunctionAt returns the function holding the link-time address addr
// (a symbol value, or an address of a stack trace minus the object's
// load bias): of the functions starting at or below addr, the nearest
// whose extent covers it. The error wraps ErrNotFound.
func (b *Binary) FunctionAt(addr uint64) (Function, error) {
	if i, ok := b.funcs.At(addr); ok {
		return b.function(i), nil
	}
	return Function{}, fmt.Errorf("uprobe: %s: no function holds address %#x: %w", b.display, addr, ErrNotFound)
}

// maxLinearCandidates is how many candidate addresses of one name are
// compared pairwise; beyond, a set is used (a hostile file may give
// a million symbols one name).
const maxLinearCandidates = 16

// Function resolves one function by name: name, name@VERSION or
// name@@VERSION. A bare name bound to several addresses picks the default
// version, then the one global definition; otherwise it is ErrAmbiguous.
func (b *Binary) Function(name string) (Function, error) {
	base, version, exact := name, "", false
	isDefault := false
	if i := strings.Index(name, "@"); i > 0 {
		base, version, exact = name[:i], name[i+1:], true
		if strings.HasPrefix(version, "@") {
			version, isDefault = version[1:], true
		}
	}
	var cands []Function
	var seen map[uint64]bool
	b.funcs.Lookup(base, func(i int) bool {
		fn := b.function(i)
		if exact && (fn.Version != version || (isDefault && !fn.DefaultVersion)) {
			return true
		}
		switch {
		case seen != nil:
			if seen[fn.Address] {
				return true
			}
			seen[fn.Address] = true
		case slices.ContainsFunc(cands, func(c Function) bool { return c.Address == fn.Address }):
			return true
		case len(cands) == maxLinearCandidates:
			seen = make(map[uint64]bool)
			for _, c := range cands {
				seen[c.Address] = true
			}
			seen[fn.Address] = true
		}
		cands = append(cands, fn)
		return true
	})
	if !exact && len(cands) > 0 && !slices.ContainsFunc(cands, func(c Function) bool { return c.Version == "" || c.DefaultVersion }) {
		// Only hidden versions are functions (memcpy@GLIBC_2.2.5 in glibc,
		// whose default memcpy@@GLIBC_2.14 is an IFUNC): a bare name means
		// the default, which is not among them.
		if _, ok := b.symbolType(base); ok {
			return Function{}, fmt.Errorf("%w (a hidden version is a function: name it, e.g. %s)", b.missing(name, base), cands[0])
		}
	}
	switch {
	case len(cands) == 1:
		return cands[0], nil
	case len(cands) == 0:
		return Function{}, b.missing(name, base)
	}
	for _, pick := range []func(Function) bool{
		func(f Function) bool { return f.Version != "" && f.DefaultVersion },
		func(f Function) bool { return f.Global },
	} {
		var picked []Function
		for _, c := range cands {
			if pick(c) {
				picked = append(picked, c)
			}
		}
		if len(picked) == 1 {
			return picked[0], nil
		}
		if len(picked) > 1 {
			cands = picked
		}
	}
	addrs := make([]string, len(cands))
	for i, c := range cands {
		addrs[i] = fmt.Sprintf("%s at %#x", c, c.Address)
	}
	return Function{}, fmt.Errorf("uprobe: %s: symbol %q: %w: %s (name a version, or use Functions and Options.Offset)",
		b.display, name, ErrAmbiguous, strings.Join(addrs, ", "))
}

// missing explains why name is not a function.
func (b *Binary) missing(name, base string) error {
	if typ, ok := b.symbolType(base); ok && name == base {
		hint := ""
		if typ == elf.STT_GNU_IFUNC {
			hint = " (an IFUNC resolver: it runs once at load time; probe the implementation it selects, e.g. __" + base + "_avx2)"
		}
		kind := typ.String()
		if typ == elf.STT_GNU_IFUNC {
			kind = "STT_GNU_IFUNC" // debug/elf prints the same value as STT_LOOS
		}
		return fmt.Errorf("uprobe: %s: symbol %q is %s: %w%s", b.display, name, kind, ErrNotFunction, hint)
	}
	hint := ""
	switch {
	case b.IsGo() && !strings.Contains(name, "."):
		hint = " (Go functions are package-qualified, e.g. main." + name + ")"
	case b.funcs.Symtab == nil && b.funcs.Go == nil:
		hint = " (the file is stripped and no debug file of it was found: a static function needs one, e.g. from a -dbg or -dbgsym package)"
	case b.funcs.Len() == 0:
		hint = " (the file has no function symbols: stripped?)"
	}
	return fmt.Errorf("uprobe: %s: function %q: %w%s", b.display, name, ErrNotFound, hint)
}

// symbolType returns the type of a defined symbol named name that is not a
// function (an object, TLS, an IFUNC resolver, an untyped label), to say
// why name cannot be probed. ok is false when there is none.
func (b *Binary) symbolType(name string) (typ elf.SymType, ok bool) {
	for _, t := range []*safeelf.Symbols{b.funcs.Symtab, b.funcs.Dynsym} {
		if t == nil {
			continue
		}
		t.Lookup(name, func(i int) bool {
			s := t.Symbol(i)
			switch s.Type {
			case elf.STT_OBJECT, elf.STT_NOTYPE, elf.STT_GNU_IFUNC, elf.STT_TLS, elf.STT_COMMON:
				if s.Section != elf.SHN_UNDEF {
					typ, ok = s.Type, true
				}
			}
			return true // the last definition wins, as the table order had it
		})
	}
	return typ, ok
}
