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
// starts with a prompt, "# " (root) or "$ ", and goes on while the shell
// would read on (open quotes, a trailing backslash); the lines after it, up to the next command,
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
		case lang == "console" && (strings.HasPrefix(l, "# ") || strings.HasPrefix(l, "$ ")):
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

// shellOpen tells whether a shell command continues on the next line,
// as the shell's own parser (sh -n) says: it ends inside quotes or after
// a backslash.
func shellOpen(cmd string) bool {
	if strings.HasSuffix(cmd, `\`) {
		return true
	}
	out, err := exec.Command("/bin/sh", "-n", "-c", cmd).CombinedOutput()
	return err != nil && (strings.Contains(string(out), "Unterminated") || strings.Contains(string(out), "end of file"))
}

// TestDocCommands runs the console commands of docs/commands.md and
// docs/runtimes.md as written, with the built probekit first on PATH, in
// a directory holding README.md's fib.py, runtimes.md's Hello.java and
// the func_args fixture, and checks that each output line the document
// shows is printed (PIDs, pointer values, addresses and the directory,
// /tmp/rd in the documents, aside).
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
	addrs := regexp.MustCompile(`0x[0-9a-f]{4,}`) // Debian's binaries move with their updates
	norm := func(s string) string {
		s = addrs.ReplaceAllString(s, "0xADDR")
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

// TestExampleCommands runs the console commands of the examples'
// READMEs as written: `go run ./examples/X ...` from the repository's
// root, `$ ./X ...` in a directory holding the example built and the
// repository's testdata. Their outputs hold times, counts and PIDs, so
// each output line shown is compared with numbers as N and runs of
// blanks as one: the lines, their order of fields and their words must
// be printed.
func TestExampleCommands(t *testing.T) {
	testkit.RequireKernel(t)
	root := testkit.Root()
	readmes, err := filepath.Glob(filepath.Join(root, "examples", "*", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	numbers := regexp.MustCompile(`[0-9][0-9.]*(µs|ms|ns|s)?`)
	blanks := regexp.MustCompile(`[ \t]+`)
	norm := func(s string) string {
		return blanks.ReplaceAllString(numbers.ReplaceAllString(s, "N"), " ")
	}
	ran := 0
	for _, readme := range readmes {
		example := filepath.Base(filepath.Dir(readme))
		cmds, _ := docCommands(t, readme)
		dir := ""
		for _, c := range cmds {
			cmd := exec.Command("/bin/sh", "-c", c.cmd)
			cmd.Dir = root
			// The command's own output shares the tracer's stdout; with
			// PYTHONUNBUFFERED (set on this machine) Python writes print's
			// pieces one by one, and they land inside trace lines.
			for _, kv := range os.Environ() {
				if !strings.HasPrefix(kv, "PYTHONUNBUFFERED=") {
					cmd.Env = append(cmd.Env, kv)
				}
			}
			if strings.HasPrefix(c.cmd, "./"+example) || strings.Contains(c.cmd, "| ./"+example) {
				if dir == "" {
					dir = t.TempDir()
					build := exec.Command("go", "build", "-o", dir, "./examples/"+example)
					build.Dir = root
					if out, err := build.CombinedOutput(); err != nil {
						t.Fatalf("go build ./examples/%s: %v\n%s", example, err, out)
					}
					if err := os.Symlink(filepath.Join(root, "testdata"), filepath.Join(dir, "testdata")); err != nil {
						t.Fatal(err)
					}
				}
				cmd.Dir = dir
			}
			timer := time.AfterFunc(2*time.Minute, func() { cmd.Process.Kill() })
			out, err := cmd.CombinedOutput()
			timer.Stop()
			wantFail := len(c.want) > 0 && strings.HasPrefix(c.want[len(c.want)-1], example+": ")
			if err != nil && !wantFail {
				t.Errorf("%s:%d: %s: %v\n%s", readme, c.line, c.cmd, err, trimOutput(string(out)))
				continue
			}
			ran++
			got := norm(string(out))
			for _, w := range c.want {
				if !strings.Contains(got, norm(w)) {
					t.Errorf("%s:%d: %s\nthe README shows %q; it printed:\n%s", readme, c.line, c.cmd, w, trimOutput(string(out)))
				}
			}
		}
	}
	if ran < 4 {
		t.Errorf("%d example commands ran; the READMEs show more", ran)
	}
}
