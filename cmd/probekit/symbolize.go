package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/probekit/probekit/symbolize"
)

const symbolizeUsage = "symbolize [--json] [-C] (-p PID | -e FILE) [ADDR...]"

func init() {
	register(&command{
		name:  "symbolize",
		usage: symbolizeUsage,
		summary: "name the functions holding addresses: runtime addresses of process PID, or link-time addresses of FILE " +
			"(as nm and addr2line show them); addresses in hex (0x optional) from the arguments, else from stdin, one per line",
		run: runSymbolize,
	})
}

// symbolizeStdin is where addresses are read from when none is given
// (a variable for tests).
var symbolizeStdin io.Reader = os.Stdin

func runSymbolize(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("symbolize", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	jsonOut := fs.Bool("json", false, "one JSON object per address")
	dem := fs.Bool("C", false, "demangle C++ and Rust names")
	fs.BoolVar(dem, "demangle", false, "demangle C++ and Rust names")
	pid := pidFlag(fs, "process whose runtime addresses these are")
	exe := fs.String("e", "", "ELF file whose link-time addresses these are")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return usagef("%v", err)
	}
	if (*pid == 0) == (*exe == "") {
		return usagef("give exactly one of -p PID and -e FILE")
	}
	var addrs []uint64
	if len(pos) > 0 {
		addrs = make([]uint64, 0, len(pos))
		for _, a := range pos {
			v, err := parseAddr(a)
			if err != nil {
				return usagef("%v", err)
			}
			addrs = append(addrs, v)
		}
	} else {
		sc := bufio.NewScanner(symbolizeStdin)
		for n := 1; sc.Scan(); n++ {
			line := strings.TrimSpace(sc.Text())
			if line == "" {
				continue
			}
			v, err := parseAddr(line)
			if err != nil {
				return fmt.Errorf("stdin line %d: %w", n, err)
			}
			addrs = append(addrs, v)
		}
		if err := sc.Err(); err != nil {
			return err
		}
	}
	s := symbolize.New(&symbolize.Options{Demangle: *dem})
	var frames []symbolize.Frame
	if *exe != "" {
		f, err := s.File(*exe)
		if err != nil {
			return err
		}
		frames = f.Symbolize(addrs)
	} else {
		p, err := s.Process(*pid)
		if err != nil {
			return err
		}
		if frames, err = p.Symbolize(addrs); err != nil {
			return err
		}
	}
	buf := make([]byte, 0, 64<<10)
	for _, fr := range frames {
		if *jsonOut {
			buf = appendFrameJSON(buf, fr)
		} else {
			buf = append(buf, fr.String()...)
		}
		buf = append(buf, '\n')
		if len(buf) > 60<<10 {
			if _, err := stdout.Write(buf); err != nil {
				return err
			}
			buf = buf[:0]
		}
	}
	_, err = stdout.Write(buf)
	return err
}

// parseAddr parses a hexadecimal address, with or without 0x (addr2line
// takes both).
func parseAddr(s string) (uint64, error) {
	h := strings.TrimPrefix(strings.TrimPrefix(s, "0x"), "0X")
	v, err := strconv.ParseUint(h, 16, 64)
	if err != nil || h == "" {
		return 0, errors.New("invalid address " + strconv.Quote(s) + ": want hexadecimal")
	}
	return v, nil
}

// appendFrameJSON appends fr as one JSON object: address (a "0x..."
// string), function ("" when unknown), offset, object, and file and line
// when known.
func appendFrameJSON(b []byte, fr symbolize.Frame) []byte {
	b = append(b, `{"address":"0x`...)
	b = strconv.AppendUint(b, fr.Address, 16)
	b = append(b, `","function":`...)
	b = appendJSON(b, fr.Function, false)
	b = append(b, `,"offset":`...)
	b = strconv.AppendUint(b, fr.Offset, 10)
	b = append(b, `,"object":`...)
	b = appendJSON(b, fr.Object, false)
	if fr.Line > 0 {
		b = append(b, `,"file":`...)
		b = appendJSON(b, fr.File, false)
		b = append(b, `,"line":`...)
		b = strconv.AppendInt(b, int64(fr.Line), 10)
	}
	return append(b, '}')
}
