package main

import (
	"debug/elf"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/probekit/probekit/argspec"
	"github.com/probekit/probekit/usdt"
)

func init() {
	register(&command{
		name:    "list",
		usage:   "list [--json] TARGET [GLOB]",
		summary: "list the USDT probes of TARGET (a path, a program on PATH or a library name), with every location, semaphore and argument; GLOB is provider:name with * and ?",
		run:     runList,
	})
}

func runList(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("list", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	asJSON := fs.Bool("json", false, "print one JSON document")
	pos, err := parseFlags(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(stdout, "usage: probekit list [--json] TARGET [GLOB]")
		return err
	}
	if err != nil {
		return usagef("%v", err)
	}
	if len(pos) < 1 || len(pos) > 2 {
		return usagef("want TARGET and an optional GLOB, got %d arguments", len(pos))
	}
	path, err := resolveTarget(pos[0])
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

type jsonFile struct {
	Path    string      `json:"path"`
	Machine string      `json:"machine"`
	Probes  []jsonProbe `json:"probes"`
}

type jsonProbe struct {
	Provider  string         `json:"provider"`
	Name      string         `json:"name"`
	Locations []jsonLocation `json:"locations"`
}

type jsonLocation struct {
	Address         uint64    `json:"address"`
	FileOffset      *uint64   `json:"file_offset,omitempty"`
	Base            uint64    `json:"base"`
	Semaphore       uint64    `json:"semaphore,omitempty"`
	SemaphoreOffset uint64    `json:"semaphore_offset,omitempty"`
	ArgsSpec        string    `json:"args_spec"`
	Args            []jsonArg `json:"args,omitempty"`
	ArgsError       string    `json:"args_error,omitempty"`
	Site            string    `json:"site"`
	SiteError       string    `json:"site_error,omitempty"`
}

type jsonArg struct {
	Spec          string `json:"spec"`
	Size          int    `json:"size"`
	Signed        bool   `json:"signed"`
	Float         bool   `json:"float,omitempty"`
	Kind          string `json:"kind"`
	Register      string `json:"register,omitempty"`
	IndexRegister string `json:"index_register,omitempty"`
	Scale         int    `json:"scale,omitempty"`
	Offset        *int64 `json:"offset,omitempty"`
	Value         *int64 `json:"value,omitempty"`
	Symbol        string `json:"symbol,omitempty"`
	Reason        string `json:"reason,omitempty"`
}

func writeJSON(w io.Writer, f *usdt.File, probes []*usdt.Probe) error {
	doc := jsonFile{Path: f.Path, Machine: machineName(f.Machine), Probes: make([]jsonProbe, 0, len(probes))}
	for _, p := range probes {
		jp := jsonProbe{Provider: p.Provider, Name: p.Name, Locations: make([]jsonLocation, 0, len(p.Locations))}
		for i := range p.Locations {
			l := &p.Locations[i]
			jl := jsonLocation{
				Address:  l.Address,
				Base:     l.Base,
				ArgsSpec: l.ArgsSpec,
				Site:     l.Site.String(),
			}
			if l.SiteErr != nil {
				jl.SiteError = l.SiteErr.Error()
			} else {
				off := l.FileOffset
				jl.FileOffset = &off
				jl.Semaphore, jl.SemaphoreOffset = l.Semaphore, l.SemaphoreOffset
			}
			if l.SiteErr != nil && l.Semaphore != 0 {
				jl.Semaphore = l.Semaphore
			}
			if l.ArgsErr != nil {
				jl.ArgsError = l.ArgsErr.Error()
			}
			for _, a := range l.Args {
				jl.Args = append(jl.Args, argJSON(a))
			}
			jp.Locations = append(jp.Locations, jl)
		}
		doc.Probes = append(doc.Probes, jp)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(doc)
}

func argJSON(a argspec.Arg) jsonArg {
	j := jsonArg{Spec: argSpec(a), Size: a.Size, Signed: a.Signed, Float: a.Float, Kind: a.Kind.String()}
	switch a.Kind {
	case argspec.Const:
		v := a.Value
		j.Value = &v
	case argspec.Reg:
		j.Register = a.Reg.Name
	case argspec.Mem:
		j.Register = a.Reg.Name
		off := a.Offset
		j.Offset = &off
	case argspec.SIB:
		j.Register, j.IndexRegister, j.Scale = a.Reg.Name, a.Index.Name, a.Scale
		off := a.Offset
		j.Offset = &off
	case argspec.PCRel:
		j.Register, j.Symbol = a.Reg.Name, a.Symbol
		off := a.Offset
		j.Offset = &off
	case argspec.Unsupported:
		j.Reason = a.Reason
	}
	return j
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

// machineName is "x86_64"-style where known, the EM_ name otherwise.
func machineName(m elf.Machine) string {
	if n, ok := machineNames[m]; ok {
		return n
	}
	return m.String()
}

var machineNames = map[elf.Machine]string{
	elf.EM_X86_64:    "x86_64",
	elf.EM_386:       "i386",
	elf.EM_AARCH64:   "aarch64",
	elf.EM_ARM:       "arm",
	elf.EM_S390:      "s390x",
	elf.EM_RISCV:     "riscv64",
	elf.EM_PPC64:     "ppc64",
	elf.EM_PPC:       "ppc",
	elf.EM_LOONGARCH: "loongarch64",
	elf.EM_MIPS:      "mips",
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
				fmt.Fprintf(w, "  %s\n", l.Site)
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
