package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/probekit/probekit/procmaps"
	"github.com/probekit/probekit/uprobe"
)

// listFunctions implements probekit list --functions [--json] [-p PID]
// TARGET [GLOB]: the functions uprobes can attach to, from .symtab,
// .dynsym and Go's .gopclntab, in address order (nm -n), one line each:
//
//	0000000000098930 0000000000000317 .dynsym    malloc@@GLIBC_2.2.5
//
// address and size in hex as nm -S prints them, then the table and the
// name (with its version). With -p PID, TARGET is opened as that process
// sees it, and TARGET "*" (or none) lists every object the process maps.
//
// With --params (withParams), each line ends with the function's
// signature from DWARF (listparams.go).
func listFunctions(out io.Writer, pos []string, pid int, asJSON, withParams bool) error {
	if pid < 0 {
		return usagef("invalid pid %d", pid)
	}
	if len(pos) > 2 || pid == 0 && len(pos) == 0 {
		return usagef("want TARGET and an optional GLOB, got %d arguments", len(pos))
	}
	glob := ""
	if len(pos) == 2 {
		glob = pos[1]
	}
	if pid != 0 && (len(pos) == 0 || pos[0] == "*") {
		return listProcessFunctions(out, pid, glob, asJSON, withParams)
	}
	var bin *uprobe.Binary
	var err error
	if pid != 0 {
		var proc *procmaps.Process
		if proc, err = procmaps.Open(pid); err != nil {
			return err
		}
		bin, err = uprobe.OpenProcess(proc, pos[0])
	} else {
		bin, err = uprobe.Open(pos[0])
	}
	if err != nil {
		return err
	}
	defer bin.Close()
	if asJSON {
		w := &jsonWriter{buf: make([]byte, 0, 64<<10)}
		w.open('{')
		n, err := writeFunctionsJSON(out, w, bin, glob, withParams)
		if err != nil {
			return err
		}
		if n == 0 && glob != "" {
			return noMatch(bin, glob)
		}
		w.close('}')
		return w.writeTo(out)
	}
	n, err := writeFunctionsText(out, bin, glob, withParams)
	if err == nil && n == 0 && glob != "" {
		return noMatch(bin, glob)
	}
	return err
}

func noMatch(bin *uprobe.Binary, glob string) error {
	return fmt.Errorf("%s: no function matches %q: %w", bin, glob, uprobe.ErrNotFound)
}

// writeFunctionsText writes one line per function and returns how many.
func writeFunctionsText(out io.Writer, bin *uprobe.Binary, glob string, withParams bool) (int, error) {
	buf := make([]byte, 0, 64<<10)
	n := 0
	for fn := range bin.FunctionsSeq(glob) {
		buf = appendHex16(buf, fn.Address)
		buf = append(buf, ' ')
		buf = appendHex16(buf, fn.Size)
		buf = append(buf, ' ')
		src := fn.Source.String()
		buf = append(buf, src...)
		for i := len(src); i < len(".gopclntab"); i++ {
			buf = append(buf, ' ')
		}
		buf = append(buf, ' ')
		buf = appendFunctionName(buf, fn)
		if withParams {
			if sig := signatureOf(bin, fn); sig != "" {
				buf = append(buf, "  "...)
				buf = append(buf, sig...)
			}
		}
		buf = append(buf, '\n')
		n++
		if len(buf) > 60<<10 {
			if _, err := out.Write(buf); err != nil {
				return n, err
			}
			buf = buf[:0]
		}
	}
	_, err := out.Write(buf)
	return n, err
}

// appendHex16 appends v as 16 hex digits, as nm prints a 64-bit value.
func appendHex16(buf []byte, v uint64) []byte {
	const digits = "0123456789abcdef"
	for shift := 60; shift >= 0; shift -= 4 {
		buf = append(buf, digits[v>>uint(shift)&0xf])
	}
	return buf
}

// appendFunctionName appends name, name@VERSION or name@@VERSION.
func appendFunctionName(buf []byte, fn uprobe.Function) []byte {
	buf = append(buf, fn.Name...)
	if fn.Version != "" {
		buf = append(buf, '@')
		if fn.DefaultVersion {
			buf = append(buf, '@')
		}
		buf = append(buf, fn.Version...)
	}
	return buf
}

// writeFunctionsJSON writes the members "path", "machine" and
// "functions": [{"name", "version", "default_version", "address",
// "offset", "size", "source"}] of one object, flushing w to out as it
// grows, and returns the number of functions. address is the link-time
// address nm shows (st_value, or the pclntab entry), offset the file
// offset a uprobe takes; version and default_version are left out for an
// unversioned symbol.
func writeFunctionsJSON(out io.Writer, w *jsonWriter, bin *uprobe.Binary, glob string, withParams bool) (int, error) {
	w.str("path", bin.Path())
	w.str("machine", machineName(bin.Machine()))
	w.key("functions")
	w.open('[')
	n := 0
	for fn := range bin.FunctionsSeq(glob) {
		w.elem()
		w.open('{')
		w.str("name", fn.Name)
		if fn.Version != "" {
			w.str("version", fn.Version)
			w.bool("default_version", fn.DefaultVersion)
		}
		w.uint("address", fn.Address)
		w.uint("offset", fn.Offset)
		w.uint("size", fn.Size)
		w.str("source", fn.Source.String())
		if withParams {
			if sig := signatureOf(bin, fn); sig != "" {
				w.str("signature", sig)
			}
		}
		w.close('}')
		n++
		if len(w.buf) > 60<<10 {
			if _, err := out.Write(w.buf); err != nil {
				return n, err
			}
			w.buf = w.buf[:0]
		}
	}
	w.close(']')
	return n, nil
}

// listProcessFunctions lists the functions of every ELF object process
// pid maps, each opened inside the process's root. JSON: {"pid",
// "objects": [{"path", "machine", "functions": [...]}]}.
func listProcessFunctions(out io.Writer, pid int, glob string, asJSON, withParams bool) error {
	proc, objs, err := procmaps.Objects(pid)
	if err != nil {
		return err
	}
	w := &jsonWriter{buf: make([]byte, 0, 64<<10)}
	if asJSON {
		w.open('{')
		w.int("pid", int64(pid))
		w.key("objects")
		w.open('[')
	}
	total, listed := 0, 0
	for _, o := range objs {
		bin, err := uprobe.OpenProcess(proc, o.Path)
		if errors.Is(err, os.ErrPermission) || errors.Is(err, procmaps.ErrProcessGone) {
			fmt.Fprintf(os.Stderr, "probekit list: skipping %s: %v\n", o.Path, err)
			continue
		}
		if err != nil {
			// Not ELF (locale archives, fonts and caches are mapped
			// too), or deleted: nothing to list.
			continue
		}
		if !hasFunction(bin, glob) {
			bin.Close()
			continue
		}
		var n int
		if asJSON {
			w.elem()
			w.open('{')
			n, err = writeFunctionsJSON(out, w, bin, glob, withParams)
			w.close('}')
		} else {
			if listed > 0 {
				if _, err := io.WriteString(out, "\n"); err != nil {
					bin.Close()
					return err
				}
			}
			if _, err := io.WriteString(out, o.Path+":\n"); err != nil {
				bin.Close()
				return err
			}
			n, err = writeFunctionsText(out, bin, glob, withParams)
		}
		bin.Close()
		if err != nil {
			return err
		}
		total += n
		listed++
	}
	// The process may have exited while its files were read.
	if err := proc.Check(); err != nil {
		return err
	}
	if total == 0 && glob != "" {
		return fmt.Errorf("pid %d: no function matches %q: %w", pid, glob, uprobe.ErrNotFound)
	}
	if asJSON {
		w.close(']')
		w.close('}')
		return w.writeTo(out)
	}
	return nil
}

// hasFunction reports whether bin has a function matching glob.
func hasFunction(bin *uprobe.Binary, glob string) bool {
	for range bin.FunctionsSeq(glob) {
		return true
	}
	return false
}
