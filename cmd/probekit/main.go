package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
)

// command is one subcommand. Each lives in its own file and registers
// itself from an init function, so adding one touches no other file.
type command struct {
	name    string
	usage   string // the synopsis after "probekit"
	summary string
	run     func(args []string, stdout io.Writer) error
	// runIO, when set, is run instead of run, with the standard error
	// its warnings go to.
	runIO func(args []string, stdout, stderr io.Writer) error
}

var commands = map[string]*command{}

func register(c *command) { commands[c.name] = c }

// usageError is a command line that does not parse; it exits with 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{fmt.Sprintf(format, args...)}
}

func main() {
	// Buffered: a listing is thousands of small writes, each a syscall
	// unbuffered (libjvm.so's 531 locations took 3x longer).
	out := bufio.NewWriterSize(os.Stdout, 64<<10)
	code := run(os.Args[1:], out, os.Stderr)
	if err := quietEnd(out.Flush()); err != nil && code == 0 {
		fmt.Fprintln(os.Stderr, "probekit:", err)
		code = 1
	}
	os.Exit(code)
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && (args[0] == "--version" || args[0] == "version") {
		fmt.Fprintln(stdout, version())
		return 0
	}
	if len(args) == 2 && args[0] == "help" && commands[args[1]] != nil {
		args = []string{args[1], "--help"}
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		printUsage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	c := commands[args[0]]
	if c == nil {
		fmt.Fprintf(stderr, "probekit: unknown command %q\n\n", args[0])
		printUsage(stderr)
		return 2
	}
	if wantsHelp(args[1:]) && c.name != "export" {
		// The command's flag set is defined and asked for help, then
		// printed whole.
		args = []string{args[0], "-h"}
		if c.runIO != nil {
			c.runIO(args[1:], io.Discard, io.Discard)
		} else {
			c.run(args[1:], io.Discard)
		}
		printHelp(stdout, c)
		return 0
	}
	var err error
	if c.runIO != nil {
		err = c.runIO(args[1:], stdout, stderr)
	} else {
		err = c.run(args[1:], stdout)
	}
	var ue *usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "probekit %s: %v\nusage: probekit %s\n", c.name, err, c.usage)
		return 2
	default:
		fmt.Fprintf(stderr, "probekit %s: %v\n", c.name, err)
		return 1
	}
}

func printUsage(w io.Writer) {
	fmt.Fprintln(w, "probekit lists, traces and counts USDT probes and function probes (uprobes) of programs, names their addresses, and exports Prometheus metrics counted in the kernel.")
	fmt.Fprintln(w, "\nusage (probekit COMMAND --help for its flags and examples; probekit --version):")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		c := commands[n]
		fmt.Fprintf(w, "  probekit %s\n      %s\n", c.usage, c.summary)
	}
}

// parseFlags parses fs over args, accepting flags before and after the
// positional arguments ("list TARGET --json"); "--" ends the flags.
func parseFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		i := 0
		for i < len(rest) && !strings.HasPrefix(rest[i], "-") {
			i++
		}
		pos = append(pos, rest[:i]...)
		if i == len(rest) {
			return pos, nil
		}
		if rest[i] == "--" || rest[i] == "-" {
			return append(pos, rest[i:]...), nil
		}
		args = rest[i:]
	}
}

// pidValue is a -p flag's value: a process id above 0. 0 is refused, not
// read as "no PID": where -p is optional, no PID means every process.
type pidValue struct{ pid *int }

func (v pidValue) String() string {
	if v.pid == nil {
		return "0"
	}
	return strconv.Itoa(*v.pid)
}

func (v pidValue) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		return errors.New("invalid PID: want a process id above 0")
	}
	*v.pid = n
	return nil
}

// pidFlag defines -p PID on fs; the PID is 0 when -p is not given.
func pidFlag(fs *flag.FlagSet, usage string) *int {
	pid := new(int)
	fs.Var(pidValue{pid}, "p", usage)
	return pid
}
