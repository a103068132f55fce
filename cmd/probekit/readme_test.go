package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/probekit/probekit/internal/test/testkit"
)

// TestREADMECommands runs every `# probekit ...` line of README.md's
// console blocks as written (a shell, the built probekit first on PATH,
// in a directory holding the README's fib.py) and checks that each
// output line the README shows is printed: PIDs, the directory and
// addresses of 4 hex digits or more (Debian's binaries move with their
// updates) aside, and for a histogram of a program's mallocs the bucket
// labels only (the counts depend on the files ls lists).
func TestREADMECommands(t *testing.T) {
	testkit.RequireKernel(t)
	b, err := os.ReadFile(filepath.Join(testkit.Root(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	type block struct {
		cmd  string
		want []string
	}
	var blocks []block
	var fib strings.Builder
	inConsole, inPython := false, false
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		l := sc.Text()
		switch {
		case l == "```console":
			inConsole = true
		case l == "```python" && fib.Len() == 0:
			inPython = true
		case l == "```":
			inConsole, inPython = false, false
		case inPython:
			fib.WriteString(l + "\n")
		case inConsole && strings.HasPrefix(l, "# probekit "):
			blocks = append(blocks, block{cmd: strings.TrimPrefix(l, "# ")})
		case inConsole && len(blocks) > 0 && l != "...":
			blocks[len(blocks)-1].want = append(blocks[len(blocks)-1].want, l)
		}
	}
	if len(blocks) < 5 || fib.Len() == 0 {
		t.Fatalf("%d commands and %d bytes of fib.py found in README.md", len(blocks), fib.Len())
	}
	bin := buildProbekit(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "fib.py"), []byte(fib.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	pids := regexp.MustCompile(`(?m)^\d+/\d+ `)
	bucket := regexp.MustCompile(`^\[\d+, \d+\)`)
	// Addresses in Debian's binaries move with each package update.
	addrs := regexp.MustCompile(`0x[0-9a-f]{4,}`)
	norm := func(s string) string {
		s = addrs.ReplaceAllString(s, "0xADDR")
		s = pids.ReplaceAllString(s, "PID/TID ")
		return strings.ReplaceAll(s, dir+"/", "DIR/")
	}
	for _, bl := range blocks {
		cmd := exec.Command("/bin/sh", "-c", bl.cmd)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(bin)+":"+os.Getenv("PATH"))
		timer := time.AfterFunc(2*time.Minute, func() { cmd.Process.Kill() })
		out, err := cmd.CombinedOutput()
		timer.Stop()
		if err != nil {
			t.Errorf("%s: %v\n%s", bl.cmd, err, out)
			continue
		}
		got := norm(string(out))
		for _, w := range bl.want {
			w = norm(strings.ReplaceAll(w, "/tmp/rd/", "DIR/"))
			if m := bucket.FindString(w); m != "" && strings.Contains(bl.cmd, "--hist") {
				w = m
			}
			if !strings.Contains(got, w) {
				t.Errorf("%s: the README shows %q; it printed:\n%s", bl.cmd, w, got)
			}
		}
	}
}
