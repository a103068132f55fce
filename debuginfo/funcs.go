package debuginfo

import (
	"debug/elf"
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
	if ef.SectionByType(elf.SHT_SYMTAB) != nil {
		return ef.Functions()
	}
	warn := func(error) {}
	if opts != nil && opts.Warn != nil {
		warn = opts.Warn
	}
	d, err := Find(obj, path, opts)
	if err != nil {
		return ef.Functions()
	}
	defer d.Close()
	if d.Source == SourceSelf {
		return ef.Functions()
	}
	funcs, err := functionsWith(ef, d)
	if err != nil {
		warn(fmt.Errorf("debuginfo: %s: symbols of debug file %s: %w", path, d.Path, err))
		return ef.Functions()
	}
	return funcs, nil
}

func functionsWith(ef *safeelf.File, d *File) (funcs *safeelf.Funcs, err error) {
	defer safeelf.Recover(&err)
	dbg, err := safeelf.NewFile(d)
	if err != nil {
		return nil, err
	}
	return ef.FunctionsWith(dbg)
}
