// Package readelf runs binutils' readelf on a file and parses its text
// output into the facts probekit's goldens record: the ELF header's class,
// data encoding and machine, the program headers, the .stapsdt.base
// section, and every stapsdt note.
//
// It is the external oracle of the usdt tests, so it deliberately shares
// no code with probekit's own ELF and note parsers: everything here comes
// from readelf's printed text.
package readelf

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// ErrNotELF indicates a file readelf does not accept as ELF.
var ErrNotELF = errors.New("not an ELF file")

// Golden is what readelf says about one file.
type Golden struct {
	// File is the name the golden is stored under (the file's base name
	// unless the generator was told otherwise).
	File string `json:"file"`
	// Class is readelf's "Class:" ("ELF64", "ELF32").
	Class string `json:"class"`
	// Data is "little" or "big".
	Data string `json:"data"`
	// Machine is readelf's "Machine:" text ("AArch64").
	Machine string `json:"machine"`
	// EMachine is the EM_ constant name for Machine, from the table below
	// ("EM_AARCH64"), empty when the table does not know it.
	EMachine string `json:"e_machine"`
	// StapsdtBase is the address of the .stapsdt.base section, 0 when the
	// file has no such section (or no section headers).
	StapsdtBase uint64    `json:"stapsdt_base"`
	Segments    []Segment `json:"segments"`
	Probes      []Note    `json:"probes"`
}

// Segment is one program header as readelf -lW prints it.
type Segment struct {
	Type   string `json:"type"`
	Offset uint64 `json:"offset"`
	Vaddr  uint64 `json:"vaddr"`
	Filesz uint64 `json:"filesz"`
	Memsz  uint64 `json:"memsz"`
	// Flags is the "Flg" column without spaces: "R", "RW", "RE", "RWE".
	Flags string `json:"flags"`
}

// Note is one NT_STAPSDT note as readelf -n prints it, in file order.
type Note struct {
	Provider  string `json:"provider"`
	Name      string `json:"name"`
	Location  uint64 `json:"location"`
	Base      uint64 `json:"base"`
	Semaphore uint64 `json:"semaphore"`
	Args      string `json:"args"`
}

// machines maps readelf's machine descriptions (binutils
// get_machine_name) to the names of Go's debug/elf constants.
var machines = map[string]string{
	"Advanced Micro Devices X86-64": "EM_X86_64",
	"Intel 80386":                   "EM_386",
	"AArch64":                       "EM_AARCH64",
	"ARM":                           "EM_ARM",
	"IBM S/390":                     "EM_S390",
	"RISC-V":                        "EM_RISCV",
	"PowerPC64":                     "EM_PPC64",
	"PowerPC":                       "EM_PPC",
	"LoongArch":                     "EM_LOONGARCH",
	"MIPS R3000":                    "EM_MIPS",
}

// Read runs readelf on path. It returns ErrNotELF for a file readelf
// rejects as not ELF.
func Read(path string) (*Golden, error) {
	hdr, err := run("-h", path)
	if err != nil {
		return nil, err
	}
	g := &Golden{}
	if err := parseHeader(hdr, g); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	segs, err := run("-lSW", path)
	if err != nil {
		return nil, err
	}
	if err := parseSegments(segs, g); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	notes, err := run("-n", path)
	if err != nil {
		return nil, err
	}
	if err := parseNotes(notes, g); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return g, nil
}

func run(flag, path string) ([]byte, error) {
	cmd := exec.Command("readelf", "--wide", flag, path)
	cmd.Env = append(cmd.Environ(), "LC_ALL=C")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if strings.Contains(stderr.String(), "Not an ELF file") {
		return nil, fmt.Errorf("%s: %w", path, ErrNotELF)
	}
	if err != nil {
		return nil, fmt.Errorf("readelf %s %s: %w: %s", flag, path, err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

func parseHeader(out []byte, g *Golden) error {
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		key, val, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok {
			continue
		}
		val = strings.TrimSpace(val)
		switch key {
		case "Class":
			g.Class = val
		case "Data":
			switch {
			case strings.Contains(val, "little endian"):
				g.Data = "little"
			case strings.Contains(val, "big endian"):
				g.Data = "big"
			default:
				return fmt.Errorf("unknown data encoding %q", val)
			}
		case "Machine":
			g.Machine = val
			g.EMachine = machines[val]
		}
	}
	if g.Class == "" || g.Data == "" || g.Machine == "" {
		return errors.New("readelf -h: class, data or machine missing")
	}
	return nil
}

// parseSegments reads the "Program Headers:" table and the .stapsdt.base
// line of the "Section Headers:" table of readelf -lSW.
func parseSegments(out []byte, g *Golden) error {
	sc := bufio.NewScanner(bytes.NewReader(out))
	inProgs := false
	for sc.Scan() {
		line := sc.Text()
		trim := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(trim, "Program Headers:"):
			inProgs = true
			continue
		case trim == "" || strings.HasPrefix(trim, "Section to Segment"):
			inProgs = false
			continue
		}
		if strings.Contains(line, "] .stapsdt.base ") {
			// "  [18] .stapsdt.base     PROGBITS        000000000000210c ..."
			_, rest, _ := strings.Cut(line, "] .stapsdt.base ")
			f := strings.Fields(rest)
			if len(f) < 2 {
				return fmt.Errorf("bad section line %q", line)
			}
			v, err := strconv.ParseUint(f[1], 16, 64)
			if err != nil {
				return fmt.Errorf("bad section line %q: %w", line, err)
			}
			g.StapsdtBase = v
			continue
		}
		if !inProgs || strings.HasPrefix(trim, "Type ") || strings.HasPrefix(trim, "[") {
			continue
		}
		s, err := parseSegment(trim)
		if err != nil {
			return err
		}
		g.Segments = append(g.Segments, s)
	}
	return sc.Err()
}

// parseSegment parses "LOAD 0x001000 0x...1000 0x...1000 0x000ac5 0x000ac5 R E 0x1000".
func parseSegment(line string) (Segment, error) {
	f := strings.Fields(line)
	if len(f) < 8 {
		return Segment{}, fmt.Errorf("bad program header line %q", line)
	}
	var nums [5]uint64
	for i := range nums {
		v, err := strconv.ParseUint(strings.TrimPrefix(f[1+i], "0x"), 16, 64)
		if err != nil {
			return Segment{}, fmt.Errorf("bad program header line %q: %w", line, err)
		}
		nums[i] = v
	}
	// Flags are the fields between MemSiz and Align: "R", "R E", "RW", "RWE".
	flags := strings.Join(f[6:len(f)-1], "")
	return Segment{Type: f[0], Offset: nums[0], Vaddr: nums[1], Filesz: nums[3], Memsz: nums[4], Flags: flags}, nil
}

func parseNotes(out []byte, g *Golden) error {
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 64*1024), 16<<20)
	var cur *Note
	for sc.Scan() {
		line := sc.Text()
		trim := strings.TrimLeft(line, " ")
		switch {
		case strings.HasPrefix(trim, "stapsdt ") && strings.Contains(line, "NT_STAPSDT"):
			g.Probes = append(g.Probes, Note{})
			cur = &g.Probes[len(g.Probes)-1]
			// With --wide, readelf prints the provider on the note's line,
			// after a tab.
			if _, prov, ok := strings.Cut(line, "\tProvider: "); ok {
				cur.Provider = prov
			} else if _, prov, ok := strings.Cut(line, "    Provider: "); ok {
				cur.Provider = prov
			}
		case cur == nil:
		case strings.HasPrefix(trim, "Provider: "):
			cur.Provider = strings.TrimPrefix(trim, "Provider: ")
		case strings.HasPrefix(trim, "Name: "):
			cur.Name = strings.TrimPrefix(trim, "Name: ")
		case strings.HasPrefix(trim, "Location: "):
			// "Location: 0x..., Base: 0x..., Semaphore: 0x..."
			for _, part := range strings.Split(trim, ", ") {
				key, val, ok := strings.Cut(part, ": ")
				if !ok {
					return fmt.Errorf("bad location line %q", line)
				}
				v, err := strconv.ParseUint(strings.TrimPrefix(val, "0x"), 16, 64)
				if err != nil {
					return fmt.Errorf("bad location line %q: %w", line, err)
				}
				switch key {
				case "Location":
					cur.Location = v
				case "Base":
					cur.Base = v
				case "Semaphore":
					cur.Semaphore = v
				}
			}
		case strings.HasPrefix(trim, "Arguments:"):
			cur.Args = strings.TrimPrefix(strings.TrimPrefix(trim, "Arguments:"), " ")
			cur = nil
		default:
			// Another owner's note: stop attributing lines to the last probe.
			cur = nil
		}
	}
	return sc.Err()
}
