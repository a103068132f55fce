package uprobe

import (
	"cmp"
	"debug/elf"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Source says which table a function came from.
type Source uint8

const (
	// SymbolTable is .symtab (removed by strip).
	SymbolTable Source = iota + 1
	// DynamicSymbols is .dynsym (exported symbols, with versions).
	DynamicSymbols
	// GoPCLNTab is the Go runtime's function table, kept by -s -w.
	GoPCLNTab
)

func (s Source) String() string {
	switch s {
	case SymbolTable:
		return ".symtab"
	case DynamicSymbols:
		return ".dynsym"
	case GoPCLNTab:
		return ".gopclntab"
	}
	return fmt.Sprintf("Source(%d)", uint8(s))
}

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

// loadFunctions fills b.funcs from .symtab and .dynsym and, for a Go
// program without function symbols, from .gopclntab.
func (b *Binary) loadFunctions(ef *elf.File) error {
	type key struct {
		name string
		addr uint64
	}
	seen := make(map[key]int)
	b.others = make(map[string]elf.SymType)
	add := func(syms []elf.Symbol, src Source) {
		for _, s := range syms {
			typ := elf.ST_TYPE(s.Info)
			if s.Section == elf.SHN_UNDEF || s.Name == "" {
				continue // an import, resolved in another object
			}
			if typ != elf.STT_FUNC {
				if typ == elf.STT_OBJECT || typ == elf.STT_NOTYPE || typ == elf.STT_GNU_IFUNC || typ == elf.STT_TLS || typ == elf.STT_COMMON {
					b.others[s.Name] = typ
				}
				continue
			}
			off, ok := b.fileOffset(s.Value)
			if !ok {
				b.skipped++
				continue
			}
			fn := Function{
				Name: s.Name, Address: s.Value, Offset: off, Size: s.Size,
				Global: bind(s.Info) != elf.STB_LOCAL, Source: src,
			}
			if s.HasVersion && s.Version != "" {
				fn.Version = s.Version
				fn.DefaultVersion = !s.VersionIndex.IsHidden()
			}
			if i, dup := seen[key{s.Name, s.Value}]; dup {
				// The same function in .symtab and .dynsym: keep one,
				// with the version only .dynsym carries.
				if fn.Version != "" {
					b.funcs[i].Version, b.funcs[i].DefaultVersion = fn.Version, fn.DefaultVersion
				}
				b.funcs[i].Size = max(b.funcs[i].Size, fn.Size)
				continue
			}
			seen[key{s.Name, s.Value}] = len(b.funcs)
			b.funcs = append(b.funcs, fn)
		}
	}
	syms, err := ef.Symbols()
	if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
		return fmt.Errorf("uprobe: %s: read .symtab: %w", b.display, err)
	}
	add(syms, SymbolTable)
	dyn, err := ef.DynamicSymbols()
	if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
		return fmt.Errorf("uprobe: %s: read .dynsym: %w", b.display, err)
	}
	add(dyn, DynamicSymbols)

	if b.IsGo() && !hasGoFunctions(b.funcs) {
		gofns, err := b.goFunctions(ef)
		if err != nil {
			return err
		}
		b.funcs = append(b.funcs, gofns...)
	}

	slices.SortFunc(b.funcs, func(x, y Function) int {
		return cmp.Or(cmp.Compare(x.Address, y.Address), strings.Compare(x.Name, y.Name))
	})
	b.byName = make(map[string][]int, len(b.funcs))
	for i, fn := range b.funcs {
		b.byName[fn.Name] = append(b.byName[fn.Name], i)
	}
	return nil
}

// hasGoFunctions reports whether a symbol table lists the Go runtime's
// functions, i.e. the binary was not built with -s.
func hasGoFunctions(fns []Function) bool {
	for _, fn := range fns {
		if fn.Name == "runtime.main" || fn.Name == "runtime.goexit" {
			return true
		}
	}
	return false
}

func bind(info byte) elf.SymBind { return elf.ST_BIND(info) }

// Functions returns the functions whose name matches glob, sorted by
// address. In glob, '*' matches any run of characters (including '/' and
// '.', which Go and C++ names contain), '?' one character, '\' escapes the
// next one; '[' is literal, since C++ names contain it. A glob with '@'
// is matched against name@VERSION / name@@VERSION. "" or "*" lists all.
func (b *Binary) Functions(glob string) []Function {
	versioned := strings.Contains(glob, "@")
	// The literal head of the pattern rejects most names without running
	// the matcher (uv_fs_* over Node's ~100k symbols).
	prefix := glob[:strings.IndexFunc(glob+"*", func(r rune) bool { return r == '*' || r == '?' || r == '\\' })]
	var out []Function
	for _, fn := range b.funcs {
		if !strings.HasPrefix(fn.Name, prefix) && !(versioned && strings.HasPrefix(fn.String(), prefix)) {
			continue
		}
		name := fn.Name
		if versioned {
			name = fn.String()
		}
		if glob == "" || matchGlob(glob, name) {
			out = append(out, fn)
		}
	}
	return out
}

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
	for _, i := range b.byName[base] {
		fn := b.funcs[i]
		if exact && (fn.Version != version || (isDefault && !fn.DefaultVersion)) {
			continue
		}
		if !slices.ContainsFunc(cands, func(c Function) bool { return c.Address == fn.Address }) {
			cands = append(cands, fn)
		}
	}
	if !exact && len(cands) > 0 && !slices.ContainsFunc(cands, func(c Function) bool { return c.Version == "" || c.DefaultVersion }) {
		// Only hidden versions are functions (memcpy@GLIBC_2.2.5 in glibc,
		// whose default memcpy@@GLIBC_2.14 is an IFUNC): a bare name means
		// the default, which is not among them.
		if _, ok := b.others[base]; ok {
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
	if typ, ok := b.others[base]; ok && name == base {
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
	case len(b.funcs) == 0:
		hint = " (the file has no function symbols: stripped?)"
	}
	return fmt.Errorf("uprobe: %s: function %q: %w%s", b.display, name, ErrNotFound, hint)
}

// matchGlob matches name against pattern ('*', '?', '\' escapes). It is
// iterative with one backtrack point, so it runs in O(len(pattern) *
// len(name)) on any input.
func matchGlob(pattern, name string) bool {
	p, n := 0, 0
	starP, starN := -1, 0
	for n < len(name) {
		if p < len(pattern) {
			switch c := pattern[p]; c {
			case '*':
				starP, starN = p, n
				p++
				continue
			case '?':
				p++
				n++
				continue
			case '\\':
				if p+1 < len(pattern) && pattern[p+1] == name[n] {
					p += 2
					n++
					continue
				}
			default:
				if c == name[n] {
					p++
					n++
					continue
				}
			}
		}
		if starP < 0 {
			return false
		}
		starN++
		p, n = starP+1, starN
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}
