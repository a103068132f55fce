package debuginfo

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"

	"github.com/probekit/probekit/internal/safeelf"
)

// Functions returns the function table of the ELF object ef, read from
// obj at path (see Find), joined with the static functions of its debug
// file: when the object has no .symtab of its own (stripped), Find is
// asked for its debug file, whose .symtab replaces the missing one
// (safeelf.File.FunctionsWith). When no debug file is found, or it cannot
// be read, the object's own table is returned and the reason goes to
// opts.Warn; an error is only the object's own table failing.
//
// The table type is internal: this is the entry point for probekit's own
// packages (uprobe, symbolize); users get the same functions through
// uprobe.Binary.
func Functions(ef *safeelf.File, obj *os.File, path string, opts *Options) (*safeelf.Funcs, error) {
	funcs, _, err := FunctionsFrom(ef, obj, path, opts)
	return funcs, err
}

// FunctionsFrom is Functions, also returning the path of the debug file
// whose .symtab joined the table ("" for none).
func FunctionsFrom(ef *safeelf.File, obj *os.File, path string, opts *Options) (*safeelf.Funcs, string, error) {
	if ef.SectionByType(elf.SHT_SYMTAB) != nil {
		funcs, err := ef.Functions()
		return funcs, "", err
	}
	warn := func(error) {}
	if opts != nil && opts.Warn != nil {
		warn = opts.Warn
	}
	own := func() (*safeelf.Funcs, string, error) {
		funcs, err := ef.Functions()
		return funcs, "", err
	}
	d, err := Find(obj, path, opts)
	if err != nil {
		// No debug file: the object's MiniDebugInfo, if it has one.
		switch funcs, _, err := MiniFunctions(ef); {
		case err == nil:
			return funcs, path + "[.gnu_debugdata]", nil
		case !errors.Is(err, ErrNoMiniDebugInfo):
			warn(fmt.Errorf("debuginfo: %s: %w", path, err))
		}
		return own()
	}
	defer d.Close()
	if d.Source == SourceSelf {
		return own()
	}
	funcs, err := functionsWith(ef, d)
	if err != nil {
		warn(fmt.Errorf("debuginfo: %s: symbols of debug file %s: %w", path, d.Path, err))
		return own()
	}
	if !funcs.SymtabFromDebug {
		return funcs, "", nil
	}
	return funcs, d.Path, nil
}

// MiniFunctions returns the function table of the stripped object ef
// joined with its MiniDebugInfo's .symtab, and the embedded file that
// .symtab is in (ErrNoMiniDebugInfo without one). Like Functions, an
// entry point for probekit's own packages.
func MiniFunctions(ef *safeelf.File) (funcs *safeelf.Funcs, mini *safeelf.File, err error) {
	defer safeelf.Recover(&err)
	if mini, err = MiniDebugInfo(ef); err != nil {
		return nil, nil, err
	}
	if funcs, err = ef.FunctionsWith(mini); err != nil {
		return nil, nil, fmt.Errorf(".gnu_debugdata's symbols: %w", err)
	}
	return funcs, mini, nil
}

func functionsWith(ef *safeelf.File, d *File) (funcs *safeelf.Funcs, err error) {
	defer safeelf.Recover(&err)
	dbg, err := safeelf.NewFile(d)
	if err != nil {
		return nil, err
	}
	return ef.FunctionsWith(dbg)
}
