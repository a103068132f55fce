package main

import (
	"flag"
	"fmt"
	"io"
	"runtime/debug"
	"sync"

	"github.com/probekit/probekit/internal/clihelp"
)

// newFlagSet is a subcommand's flag set: errors are returned, not
// printed, and -h or --help records the set for printHelp.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
		helpSets.Lock()
		helpSets.m[name] = fs
		helpSets.Unlock()
	}
	return fs
}

// helpSets are the flag sets of the subcommands asked for help (each
// call defines the same flags).
var helpSets = struct {
	sync.Mutex
	m map[string]*flag.FlagSet
}{m: map[string]*flag.FlagSet{}}

// wantsHelp reports whether args, a subcommand's, ask for help: -h,
// -help or --help before a "--".
func wantsHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--help":
			return true
		}
	}
	return false
}

// printHelp prints c's help: its synopsis and summary, every flag with
// its meaning and default, and examples with what each answers. The
// flags are those c's flag set defined when it was asked for help.
func printHelp(w io.Writer, c *command) {
	fmt.Fprintf(w, "usage: probekit %s\n\n%s\n", c.usage, c.summary)
	helpSets.Lock()
	fs := helpSets.m[c.name]
	helpSets.Unlock()
	if fs != nil {
		fmt.Fprintln(w, "\nflags:")
		clihelp.WriteFlags(w, fs)
	}
	if ex := examples[c.name]; len(ex) > 0 {
		fmt.Fprintln(w, "\nexamples:")
		for _, e := range ex {
			fmt.Fprintf(w, "  probekit %s\n      %s\n", e.cmd, e.what)
		}
	}
}

// version is probekit's module version and the revision it was built
// from, as the Go toolchain stamped them into the binary.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "probekit (no build information)"
	}
	v := "probekit " + bi.Main.Version
	var rev, when, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			when = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = ", modified"
			}
		}
	}
	if rev != "" {
		v += " (" + rev + " " + when + modified + ")"
	}
	return v + " " + bi.GoVersion
}
