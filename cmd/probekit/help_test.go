package main

import (
	"flag"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestHelp: each subcommand's --help (and -h, and probekit help CMD)
// exits 0 and lists every flag its parser accepts, one a line with its
// meaning, then five to ten examples; every trace example parses.
func TestHelp(t *testing.T) {
	for _, name := range []string{"cflags", "list", "symbolize", "trace"} {
		code, out, stderr := runCmd(name, "--help")
		if code != 0 || stderr != "" {
			t.Fatalf("%s --help: exit %d, stderr %q", name, code, stderr)
		}
		if _, short, _ := runCmd(name, "-h"); short != out {
			t.Errorf("%s -h differs from --help", name)
		}
		if _, viaHelp, _ := runCmd("help", name); viaHelp != out {
			t.Errorf("help %s differs from %s --help", name, name)
		}
		helpSets.Lock()
		fs := helpSets.m[name]
		helpSets.Unlock()
		n := 0
		fs.VisitAll(func(f *flag.Flag) {
			n++
			dash := "-"
			if len(f.Name) > 1 {
				dash = "--"
			}
			found := false
			for _, l := range strings.Split(out, "\n") {
				if strings.HasPrefix(strings.TrimSpace(l), dash+f.Name+" ") && len(strings.Fields(l)) > 2 {
					found = true
				}
			}
			if !found {
				t.Errorf("%s --help lacks a line for %s%s:\n%s", name, dash, f.Name, out)
			}
		})
		if n == 0 {
			t.Errorf("%s: no flags recorded", name)
		}
		_, ex, ok := strings.Cut(out, "\nexamples:\n")
		if !ok {
			t.Fatalf("%s --help has no examples:\n%s", name, out)
		}
		if k := strings.Count(ex, "  probekit "+name); k < 5 || k > 10 {
			t.Errorf("%s --help: %d examples, want 5 to 10", name, k)
		}
	}
	// The flags named in the complaint, by name.
	_, out, _ := runCmd("trace", "--help")
	for _, f := range []string{"--stack", "--latency", "--filter", "--by", "-p PID", "-f ", "--pprof FILE", "-n COUNT"} {
		if !strings.Contains(out, "  "+f) {
			t.Errorf("trace --help lacks %q", f)
		}
	}
	for _, e := range examples["trace"] {
		args, err := shellWords(strings.ReplaceAll(e.cmd, "PID", "1234"))
		if err != nil {
			t.Fatalf("%q: %v", e.cmd, err)
		}
		if _, err := parseTrace(args[1:]); err != nil {
			t.Errorf("example %q does not parse: %v", e.cmd, err)
		}
	}
}

// shellWords splits s as sh would for the examples: words, with '...'
// and "..." quoting.
func shellWords(s string) ([]string, error) {
	b, err := exec.Command("/bin/sh", "-c", `eval "set -- $1"; for a in "$@"; do printf '%s\0' "$a"; done`, "sh", s).Output()
	if err != nil {
		return nil, err
	}
	return strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00"), nil
}

// TestVersion: probekit --version names the module version and, built
// from a checkout, the revision built.
func TestVersion(t *testing.T) {
	code, out, _ := runCmd("--version")
	if code != 0 || !strings.HasPrefix(out, "probekit ") {
		t.Fatalf("--version: exit %d, %q", code, out)
	}
	rev, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	// As make build builds it: -buildvcs=auto over a GOFLAGS that may
	// turn the stamp off.
	bin := filepath.Join(t.TempDir(), "probekit")
	if out, err := exec.Command("go", "build", "-buildvcs=auto", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	b, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), strings.TrimSpace(string(rev))) {
		t.Errorf("built probekit --version %q lacks the revision %s", b, rev)
	}
}
