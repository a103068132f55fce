package main

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/probekit/probekit/argspec"
	"github.com/probekit/probekit/attach"
	"github.com/probekit/probekit/procmaps"
	"github.com/probekit/probekit/usdt"
)

const listUsage = "list [--json] TARGET [GLOB] | list [--json] '*' [GLOB] | list [--json] -p PID [GLOB] | list --functions [--params] [--json] [-p PID] TARGET [GLOB]"

func init() {
	register(&command{
		name:    "list",
		usage:   listUsage,
		summary: "list the USDT probes of TARGET (a path, a program on PATH or a library name), with every location, semaphore and argument; GLOB is provider:name with * and ?; with --functions, its functions as nm does (GLOB over their names)",
		run:     runList,
	})
}

func runList(args []string, stdout io.Writer) error {
	fs := newFlagSet("list")
	asJSON := fs.Bool("json", false, "print one JSON document")
	pid := pidFlag(fs, "list the probes of every object process PID has mapped")
	functions := fs.Bool("functions", false, "list the functions uprobes attach to, not USDT probes")
	params := fs.Bool("params", false, "with --functions, each function's signature from DWARF")
	pos, err := parseFlags(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(stdout, "usage: probekit "+listUsage)
		return err
	}
	if err != nil {
		return usagef("%v", err)
	}
	if *functions {
		return listFunctions(stdout, pos, *pid, *asJSON, *params)
	}
	if *pid != 0 {
		if *pid < 0 || len(pos) > 1 {
			return usagef("with -p PID, want at most a GLOB")
		}
		glob := ""
		if len(pos) == 1 {
			glob = pos[0]
		}
		return listProcess(stdout, *pid, glob, *asJSON)
	}
	if len(pos) < 1 || len(pos) > 2 {
		return usagef("want TARGET and an optional GLOB, got %d arguments", len(pos))
	}
	if pos[0] == "*" {
		// Every object mapped on the host (listall.go).
		glob := ""
		if len(pos) == 2 {
			glob = pos[1]
		}
		return listAll(stdout, glob, *asJSON)
	}
	path, err := procmaps.Resolve(pos[0])
	if err != nil {
		return err
	}
	f, err := usdt.Open(path)
	if err != nil {
		return err
	}
	probes := make([]*usdt.Probe, 0, len(f.Probes))
	if len(pos) == 2 {
		probes = f.Match(pos[1])
		if len(probes) == 0 {
			return fmt.Errorf("%s: no probe matches %q: %w", path, pos[1], usdt.ErrNotFound)
		}
	} else {
		for i := range f.Probes {
			probes = append(probes, &f.Probes[i])
		}
	}
	if *asJSON {
		return writeJSON(stdout, f, probes)
	}
	return writeText(stdout, f, probes)
}

// --- JSON ---------------------------------------------------------------

// The JSON document is written by hand, not with encoding/json: a
// reflective, indented encoding of libjvm.so's 531 locations took longer
// than parsing the file, and the listing is meant to cost no more than
// readelf -n. The shape:
//
//	{"path", "machine", "probes": [{"provider", "name", "locations": [{
//	  "address", "file_offset", "base", "semaphore", "semaphore_offset",
//	  "args_spec", "args": [{"spec", "size", "signed", "float", "kind",
//	  "register", "index_register", "scale", "offset", "value", "symbol",
//	  "reason"}], "args_error", "site", "site_error"}]}]}
//
// Numbers are JSON integers; a field that does not apply is left out
// (file_offset when the site is unusable, semaphore when there is none,
// register for a constant, ...).

// jsonWriter appends an indented JSON document to buf.
type jsonWriter struct {
	buf   []byte
	depth int
	first bool // no member written yet at this depth
}

// writeTo ends the document with a newline and writes it to out.
func (w *jsonWriter) writeTo(out io.Writer) error {
	w.buf = append(w.buf, '\n')
	_, err := out.Write(w.buf)
	return err
}

func (w *jsonWriter) newline() {
	w.buf = append(w.buf, '\n')
	for range w.depth {
		w.buf = append(w.buf, "  "...)
	}
}

func (w *jsonWriter) open(c byte) {
	w.buf = append(w.buf, c)
	w.depth++
	w.first = true
}

func (w *jsonWriter) close(c byte) {
	w.depth--
	if !w.first {
		w.newline()
	}
	w.buf = append(w.buf, c)
	w.first = false
}

// elem starts an array element or an object member.
func (w *jsonWriter) elem() {
	if !w.first {
		w.buf = append(w.buf, ',')
	}
	w.first = false
	w.newline()
}

func (w *jsonWriter) key(k string) {
	w.elem()
	w.buf = append(w.buf, '"')
	w.buf = append(w.buf, k...)
	w.buf = append(w.buf, `": `...)
}

func (w *jsonWriter) str(k, v string) {
	w.key(k)
	w.buf = appendJSON(w.buf, v, true)
}

func (w *jsonWriter) uint(k string, v uint64) {
	w.key(k)
	w.buf = strconv.AppendUint(w.buf, v, 10)
}

func (w *jsonWriter) int(k string, v int64) {
	w.key(k)
	w.buf = strconv.AppendInt(w.buf, v, 10)
}

func (w *jsonWriter) bool(k string, v bool) {
	w.key(k)
	w.buf = strconv.AppendBool(w.buf, v)
}

func writeJSON(out io.Writer, f *usdt.File, probes []*usdt.Probe) error {
	w := &jsonWriter{buf: make([]byte, 0, 64<<10)}
	w.open('{')
	w.str("path", f.Path)
	w.str("machine", machineName(f.Machine))
	if err := writeProbesJSON(out, w, probes); err != nil {
		return err
	}
	w.close('}')
	return w.writeTo(out)
}

// writeProbesJSON writes the "probes" member, flushing w to out as it
// grows.
func writeProbesJSON(out io.Writer, w *jsonWriter, probes []*usdt.Probe) error {
	w.key("probes")
	w.open('[')
	for _, p := range probes {
		w.elem()
		w.open('{')
		w.str("provider", p.Provider)
		w.str("name", p.Name)
		w.key("locations")
		w.open('[')
		for i := range p.Locations {
			writeLocationJSON(w, &p.Locations[i])
		}
		w.close(']')
		w.close('}')
		if len(w.buf) > 32<<10 {
			if _, err := out.Write(w.buf); err != nil {
				return err
			}
			w.buf = w.buf[:0]
		}
	}
	w.close(']')
	return nil
}

func writeLocationJSON(w *jsonWriter, l *usdt.Location) {
	w.elem()
	w.open('{')
	w.uint("address", l.Address)
	if l.SiteErr == nil {
		w.uint("file_offset", l.FileOffset)
	}
	w.uint("base", l.Base)
	if l.Semaphore != 0 {
		w.uint("semaphore", l.Semaphore)
		if l.SiteErr == nil {
			w.uint("semaphore_offset", l.SemaphoreOffset)
		}
	}
	w.str("args_spec", l.ArgsSpec)
	if len(l.Args) > 0 {
		w.key("args")
		w.open('[')
		for _, a := range l.Args {
			writeArgJSON(w, a)
		}
		w.close(']')
	}
	if l.ArgsErr != nil {
		w.str("args_error", l.ArgsErr.Error())
	}
	w.str("site", l.Site.String())
	if l.SiteLength > 0 {
		w.int("site_length", int64(l.SiteLength))
	}
	if l.SiteErr != nil {
		w.str("site_error", l.SiteErr.Error())
	}
	w.close('}')
}

func writeArgJSON(w *jsonWriter, a argspec.Arg) {
	w.elem()
	w.open('{')
	w.str("spec", argSpec(a))
	w.int("size", int64(a.Size))
	w.bool("signed", a.Signed)
	if a.Float {
		w.bool("float", true)
	}
	w.str("kind", a.Kind.String())
	switch a.Kind {
	case argspec.Const:
		w.int("value", a.Value)
	case argspec.Reg:
		w.str("register", a.Reg.Name)
	case argspec.Mem:
		w.str("register", a.Reg.Name)
		w.int("offset", a.Offset)
	case argspec.SIB:
		w.str("register", a.Reg.Name)
		w.str("index_register", a.Index.Name)
		w.int("scale", int64(a.Scale))
		w.int("offset", a.Offset)
	case argspec.PCRel:
		w.str("register", a.Reg.Name)
		w.str("symbol", a.Symbol)
		w.int("offset", a.Offset)
	case argspec.Unsupported:
		if a.Reason != "" {
			w.str("reason", a.Reason)
		}
	}
	w.close('}')
}

// argSpec rebuilds one argument's text from the note: [-]SIZE[f]@OPERAND.
func argSpec(a argspec.Arg) string {
	var b strings.Builder
	if a.Signed {
		b.WriteByte('-')
	}
	fmt.Fprintf(&b, "%d", a.Size)
	if a.Float {
		b.WriteByte('f')
	}
	b.WriteByte('@')
	b.WriteString(a.Operand)
	return b.String()
}

// machineName is "x86_64"-style where known, the EM_ name otherwise,
// without the byte order, which the listing prints apart: attach's
// names, with EM_PPC64 named for either order.
func machineName(m elf.Machine) string {
	return attach.MachineName(m, binary.BigEndian)
}

// --- text -------------------------------------------------------------------

// writeText prints one line per probe, then one per location and one per
// argument, indented:
//
//	sample:sema  1 location, semaphore
//	  0x1720 (file offset 0x1720)  semaphore 0x4058 (file offset 0x3058)  nop
//	    arg 1: 8 bytes signed, register rdi   (-8@%rdi)
func writeText(w io.Writer, f *usdt.File, probes []*usdt.Probe) error {
	order := "little-endian"
	if f.ByteOrder.String() == "BigEndian" {
		order = "big-endian"
	}
	class := "64-bit"
	if f.Class == elf.ELFCLASS32 {
		class = "32-bit"
	}
	nloc := 0
	for _, p := range probes {
		nloc += len(p.Locations)
	}
	fmt.Fprintf(w, "%s: %s %s %s, %d probes, %d locations\n", f.Path, machineName(f.Machine), class, order, len(probes), nloc)
	for _, p := range probes {
		sema := ""
		for _, l := range p.Locations {
			if l.Semaphore != 0 {
				sema = ", semaphore"
				break
			}
		}
		plural := "s"
		if len(p.Locations) == 1 {
			plural = ""
		}
		fmt.Fprintf(w, "%s  %d location%s%s\n", p.String(), len(p.Locations), plural, sema)
		for i := range p.Locations {
			l := &p.Locations[i]
			if l.SiteErr != nil {
				fmt.Fprintf(w, "  %#x  UNUSABLE: %v\n", l.Address, l.SiteErr)
			} else {
				fmt.Fprintf(w, "  %#x (file offset %#x)", l.Address, l.FileOffset)
				if l.Semaphore != 0 {
					fmt.Fprintf(w, "  semaphore %#x (file offset %#x)", l.Semaphore, l.SemaphoreOffset)
				}
				unit := "bytes"
				if l.SiteLength == 1 {
					unit = "byte"
				}
				fmt.Fprintf(w, "  %s (%d %s)\n", l.Site, l.SiteLength, unit)
			}
			switch {
			case l.ArgsErr != nil:
				fmt.Fprintf(w, "    arguments %q: %v\n", l.ArgsSpec, l.ArgsErr)
			case len(l.Args) == 0:
				fmt.Fprintf(w, "    no arguments\n")
			}
			for j, a := range l.Args {
				fmt.Fprintf(w, "    arg %d: %s  (%s)\n", j+1, describeArg(a), argSpec(a))
			}
		}
	}
	return nil
}

// describeArg says in words where an argument's value is.
func describeArg(a argspec.Arg) string {
	typ := "unsigned"
	switch {
	case a.Float:
		typ = "float"
	case a.Signed:
		typ = "signed"
	}
	unit := "bytes"
	if a.Size == 1 {
		unit = "byte"
	}
	what := fmt.Sprintf("%d %s %s, ", a.Size, unit, typ)
	switch a.Kind {
	case argspec.Const:
		return what + fmt.Sprintf("constant %d", a.Value)
	case argspec.Reg:
		return what + "register " + a.Reg.Name
	case argspec.Mem:
		return what + "memory at " + a.Reg.Name + signed(a.Offset)
	case argspec.SIB:
		return what + fmt.Sprintf("memory at %s + %s*%d%s", a.Reg.Name, a.Index.Name, a.Scale, signed(a.Offset))
	case argspec.PCRel:
		return what + fmt.Sprintf("memory at symbol %s%s (%s-relative)", a.Symbol, signed(a.Offset), a.Reg.Name)
	default:
		return what + "unreadable: " + a.Reason
	}
}

func signed(v int64) string {
	switch {
	case v > 0:
		return fmt.Sprintf(" + %d", v)
	case v < 0:
		return fmt.Sprintf(" - %d", -uint64(v))
	}
	return ""
}
