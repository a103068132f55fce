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

// docCommand is one command of a document's console block and the output
// lines the document shows under it.
type docCommand struct {
	line int
	cmd  string
	want []string
}

// docCommands reads the console blocks of a Markdown file: a command
// starts with "# " and goes on while its quotes are open or its line
// ends with a backslash; the lines after it, up to the next command,
// are its output ("..." stands for lines left out). It also returns the
// contents of the file's first block of each language in langs.
func docCommands(t *testing.T, path string, langs ...string) ([]docCommand, map[string]string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cmds []docCommand
	blocks := map[string]string{}
	var lang string
	var body strings.Builder
	open := false // a command's quotes are open, or it ends with '\'
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		switch {
		case lang == "" && strings.HasPrefix(l, "```") && len(l) > 3:
			lang = l[3:]
			body.Reset()
		case lang != "" && l == "```":
			if _, seen := blocks[lang]; !seen {
				blocks[lang] = body.String()
			}
			lang, open = "", false
		case lang == "console" && open:
			c := &cmds[len(cmds)-1]
			c.cmd += "\n" + l
			open = shellOpen(c.cmd)
		case lang == "console" && strings.HasPrefix(l, "# "):
			cmds = append(cmds, docCommand{line: n, cmd: l[2:]})
			open = shellOpen(l[2:])
		case lang == "console" && len(cmds) > 0 && l != "...":
			c := &cmds[len(cmds)-1]
			c.want = append(c.want, l)
		case lang != "":
			body.WriteString(l + "\n")
		}
	}
	for _, want := range langs {
		if blocks[want] == "" {
			t.Fatalf("%s: no %s block", path, want)
		}
	}
	return cmds, blocks
}

// shellOpen tells whether a shell command continues on the next line:
// a single quote left open or a trailing backslash.
func shellOpen(cmd string) bool {
	return strings.Count(cmd, "'")%2 == 1 || strings.HasSuffix(cmd, `\`)
}

// TestDocCommands runs the console commands of docs/commands.md and
// docs/runtimes.md as written, with the built probekit first on PATH, in
// a directory holding README.md's fib.py, runtimes.md's Hello.java and
// the func_args fixture, and checks that each output line the document
// shows is printed (PIDs, pointer values and the directory, /tmp/rd in
// the documents, aside).
func TestDocCommands(t *testing.T) {
	testkit.RequireKernel(t)
	root := testkit.Root()
	_, readme := docCommands(t, filepath.Join(root, "README.md"), "python")
	bin := buildProbekit(t)
	dir := t.TempDir()
	files := map[string]string{"fib.py": readme["python"]}
	fa, err := os.ReadFile(filepath.Join(root, "testdata", "bin", "func_args"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "func_args"), fa, 0o755); err != nil {
		t.Fatal(err)
	}
	// Commands that need what a test cannot give as written: a running
	// server and a Ctrl-C. Each names the test that runs its code path.
	covered := map[string]string{
		"-p $(pgrep -o postgres)": "TestTraceLatencyPostgres",
	}
	pids := regexp.MustCompile(`(?m)^\d+/\d+ `)
	pointers := regexp.MustCompile(`\b\d{12,}\b`)
	norm := func(s string) string {
		s = strings.ReplaceAll(s, "/tmp/rd/", "DIR/") // the documents' directory
		s = strings.ReplaceAll(s, dir+"/", "DIR/")
		return pointers.ReplaceAllString(pids.ReplaceAllString(s, "PID/TID "), "PTR")
	}
	for _, doc := range []string{"commands.md", "runtimes.md"} {
		cmds, blocks := docCommands(t, filepath.Join(root, "docs", doc))
		if java := blocks["java"]; java != "" {
			files["Hello.java"] = java
		}
		for name, body := range files {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	next:
		for _, c := range cmds {
			for part, test := range covered {
				if strings.Contains(c.cmd, part) {
					t.Logf("docs/%s:%d not run here (%s runs it)", doc, c.line, test)
					continue next
				}
			}
			cmd := exec.Command("/bin/sh", "-c", c.cmd)
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(bin)+":"+os.Getenv("PATH"))
			timer := time.AfterFunc(2*time.Minute, func() { cmd.Process.Kill() })
			out, err := cmd.CombinedOutput()
			timer.Stop()
			if err != nil {
				t.Errorf("docs/%s:%d: %s: %v\n%s", doc, c.line, c.cmd, err, out)
				continue
			}
			t.Logf("docs/%s:%d ran, %d output lines checked", doc, c.line, len(c.want))
			got := norm(string(out))
			for _, w := range c.want {
				if !strings.Contains(got, norm(w)) {
					t.Errorf("docs/%s:%d: %s\nthe document shows %q; it printed:\n%s", doc, c.line, c.cmd, w, trimOutput(got))
				}
			}
		}
	}
}

// trimOutput keeps the first and last lines of a long output.
func trimOutput(s string) string {
	lines := strings.Split(s, "\n")
	if len(lines) <= 40 {
		return s
	}
	return strings.Join(lines[:20], "\n") + "\n...\n" + strings.Join(lines[len(lines)-20:], "\n")
}
