package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/probekit/probekit/debuginfo"
	"github.com/probekit/probekit/procmaps"
	"github.com/probekit/probekit/symbolize"
)

const symbolizeUsage = "symbolize [--json] [-C] [--cache-dir DIR | --no-cache] (-p PID | -e FILE) [ADDR...]"

func init() {
	register(&command{
		name:  "symbolize",
		usage: symbolizeUsage,
		summary: "name the functions holding addresses: runtime addresses of process PID, or link-time addresses of FILE " +
			"(as nm and addr2line show them); addresses in hex (0x optional) from the arguments, else from stdin, one per line",
		runIO: runSymbolize,
	})
}

// symbolizeStdin is where addresses are read from when none is given
// (a variable for tests).
var symbolizeStdin io.Reader = os.Stdin

func runSymbolize(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("symbolize")
	jsonOut := fs.Bool("json", false, "one JSON object per frame")
	dem := fs.Bool("C", false, "demangle C++ and Rust names")
	fs.BoolVar(dem, "demangle", false, "demangle C++ and Rust names")
	pid := pidFlag(fs, "process `PID` whose runtime addresses these are")
	exe := fs.String("e", "", "the ELF `FILE` whose link-time addresses these are: a path, a program on PATH or a library name (libc.so.6)")
	cacheDir := fs.String("cache-dir", "", "the line indexes' `DIR` (default $PROBEKIT_CACHE_DIR, else systemd's $CACHE_DIRECTORY, else $XDG_CACHE_HOME/probekit, else ~/.cache/probekit; none without a home)")
	noCache := fs.Bool("no-cache", false, "read the DWARF every time: no line index read or written")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return usagef("%v", err)
	}
	if (*pid == 0) == (*exe == "") {
		return usagef("give exactly one of -p PID and -e FILE")
	}
	if *noCache && *cacheDir != "" {
		return usagef("give at most one of --cache-dir and --no-cache")
	}
	var addrs []uint64
	for _, a := range pos {
		v, err := parseAddr(a)
		if err != nil {
			return usagef("%v", err)
		}
		addrs = append(addrs, v)
	}
	sy := &symbolizer{out: bufio.NewWriterSize(stdout, 64<<10), json: *jsonOut, warn: &warner{w: stderr}}
	// A debug file refused (another build's, a bad debuglink, a failed
	// download) is said once, on stderr; the addresses are still named
	// from what was usable.
	s := symbolize.New(&symbolize.Options{Demangle: *dem, DebugInfo: debuginfo.Options{Warn: sy.warn.say},
		IndexDir: *cacheDir, NoIndex: *noCache})
	if *exe != "" {
		// A name as list and trace take it: a program on PATH or a
		// library name (libc.so.6).
		path, err := procmaps.Resolve(*exe)
		if err != nil {
			return err
		}
		if sy.file, err = s.File(path); err != nil {
			return err
		}
	} else if sy.proc, err = s.Process(*pid); err != nil {
		return err
	}
	if len(pos) > 0 {
		if err := sy.name(addrs); err != nil {
			sy.out.Flush()
			return err
		}
		return sy.out.Flush()
	}
	return sy.stream(symbolizeStdin)
}

// symbolizer prints the frames of addresses as they come.
type symbolizer struct {
	file   *symbolize.File
	proc   *symbolize.Process
	out    *bufio.Writer
	json   bool
	frames []symbolize.Frame
	buf    []byte
	warn   *warner
}

// warner prints each distinct warning once, as one line on stderr.
type warner struct {
	mu   sync.Mutex
	w    io.Writer
	seen map[string]bool
}

func (w *warner) say(err error) {
	msg := strings.ReplaceAll(err.Error(), "\n", "; ")
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.seen[msg] {
		return
	}
	if w.seen == nil {
		w.seen = map[string]bool{}
	}
	w.seen[msg] = true
	fmt.Fprintf(w.w, "probekit symbolize: warning: %s\n", msg)
}

// maxBatch bounds the addresses named at once: a process's liveness is
// checked once per batch.
const maxBatch = 4096

// stream names the addresses of in, one per line, printing as it goes:
// the addresses read are named and printed (and the output flushed)
// whenever no more input is waiting, so a caller that writes a line
// and waits gets its answer. A line that is not an address gets an
// error line in the output in its place ("error: stdin line N: ...", or
// {"error":...,"input_line":N}) and the others are still named; the
// command then fails, after all of its input, saying how many. A process
// that exits stops the stream with that error, after the output of the
// addresses named before.
func (sy *symbolizer) stream(in io.Reader) error {
	r := bufio.NewReaderSize(in, 64<<10)
	var batch []uint64
	bad, total := 0, 0
	var first error
	flush := func() error {
		if len(batch) > 0 {
			if err := sy.name(batch); err != nil {
				return err
			}
			batch = batch[:0]
		}
		return nil
	}
	for n := 1; ; n++ {
		line, rerr := r.ReadSlice('\n')
		long := false
		for rerr == bufio.ErrBufferFull {
			// A line longer than the buffer is no address: skip it.
			long = true
			_, rerr = r.ReadSlice('\n')
		}
		if rerr != nil && rerr != io.EOF {
			flush()
			sy.out.Flush()
			return fmt.Errorf("stdin line %d: %w", n, rerr)
		}
		text := bytes.TrimSpace(line)
		if long {
			text = []byte("(a line of more than 64 KiB)")
		}
		if len(text) > 0 {
			total++
			v, ok := hexAddr(text)
			var err error
			if !ok {
				_, err = parseAddr(string(text))
			}
			if long {
				err = errors.New("line too long")
			}
			if err != nil {
				bad++
				err = fmt.Errorf("stdin line %d: %w", n, err)
				if first == nil {
					first = err
				}
				if ferr := flush(); ferr != nil {
					sy.out.Flush()
					return ferr
				}
				sy.lineError(n, err)
			} else {
				batch = append(batch, v)
			}
		}
		if rerr == io.EOF || r.Buffered() == 0 || len(batch) >= maxBatch {
			if err := flush(); err != nil {
				sy.out.Flush()
				return err
			}
			if rerr == io.EOF || r.Buffered() == 0 {
				if err := sy.out.Flush(); err != nil {
					return err
				}
			}
		}
		if rerr == io.EOF {
			break
		}
	}
	if bad > 0 {
		return fmt.Errorf("%d of %d lines are not addresses (the first: %w)", bad, total, first)
	}
	return nil
}

func (sy *symbolizer) lineError(n int, err error) {
	if sy.json {
		b := append([]byte(`{"error":`), appendJSON(nil, err.Error(), false)...)
		b = append(b, `,"input_line":`...)
		b = strconv.AppendInt(b, int64(n), 10)
		sy.out.Write(append(b, "}\n"...))
		return
	}
	sy.out.WriteString("error: " + err.Error() + "\n")
}

// name symbolizes addrs and prints their frames.
func (sy *symbolizer) name(addrs []uint64) error {
	var err error
	if sy.file != nil {
		sy.frames = sy.file.FramesOf(sy.frames[:0], addrs)
	} else {
		sy.frames, err = sy.proc.SymbolizeInto(sy.frames[:0], addrs)
		if perr := sy.proc.PerfMapErr(); perr != nil {
			// The perf map refused (not the process's user's or root's,
			// a link): its JIT code stays unnamed.
			sy.warn.say(fmt.Errorf("perf map not read: %w", perr))
		}
		if err != nil {
			return err
		}
	}
	// One buffer, kept and written out whenever it holds a chunk: no
	// allocation per line, and no memory for a whole batch's text.
	b := sy.buf[:0]
	for _, fr := range sy.frames {
		if sy.json {
			b = appendFrameJSON(b, fr)
		} else {
			if sy.file != nil {
				// With -e every frame's object is the file given:
				// not repeated on each line (--json keeps it).
				fr.Object = ""
			}
			b, _ = fr.AppendText(b)
		}
		b = append(b, '\n')
		if len(b) >= outChunk {
			if _, err := sy.out.Write(b); err != nil {
				return err
			}
			b = b[:0]
		}
	}
	sy.buf = b
	_, err = sy.out.Write(b)
	return err
}

// outChunk is the size of text name writes to the output at once.
const outChunk = 16 << 10

// hexAddr is parseAddr without an allocation, for the common case: a
// hexadecimal address of at most 16 digits, with or without 0x.
func hexAddr(b []byte) (uint64, bool) {
	if len(b) > 2 && b[0] == '0' && (b[1] == 'x' || b[1] == 'X') {
		b = b[2:]
	}
	if len(b) == 0 || len(b) > 16 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		v = v<<4 | uint64(c)
	}
	return v, true
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
// string), function ("" when unknown), offset, object, file and line
// when known, and "inlined":true for a function inlined into the next
// frame's.
func appendFrameJSON(b []byte, fr symbolize.Frame) []byte {
	b = append(b, `{"address":"0x`...)
	b = strconv.AppendUint(b, fr.Address, 16)
	b = append(b, `","function":`...)
	b = appendJSON(b, fr.Function, false)
	b = append(b, `,"offset":`...)
	b = strconv.AppendUint(b, fr.Offset, 10)
	b = append(b, `,"object":`...)
	b = appendJSON(b, fr.Object, false)
	b = appendSourceJSON(b, fr)
	return append(b, '}')
}
