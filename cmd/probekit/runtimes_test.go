package main

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/probekit/probekit/internal/test/testkit"
)

// The commands of docs/runtimes.md, run through the CLI: each runtime's
// gated probe fires once what it needs is given, with the name of the
// function or method called, and no hint is printed; without it, the probe
// stays silent and the hint names the requirement.

// jdk is Debian's OpenJDK 17.
const jdk = "/usr/lib/jvm/java-17-openjdk-amd64"

// requireRuntime skips (or fails under PROBEKIT_REQUIRE_KERNEL=1) without
// root, and skips when a runtime's binary is absent.
func requireRuntime(t *testing.T, paths ...string) {
	t.Helper()
	testkit.RequireKernel(t)
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			testkit.Unavailable(t, "%s: %v", p, err)
		}
	}
}

// traceStderr runs probekit trace with args and returns its stdout and
// what it (and the launched command) wrote to os.Stderr, where the hint
// goes.
func traceStderr(t *testing.T, args ...string) (out, errOut string) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stderr
	os.Stderr = w
	read := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		read <- string(b)
	}()
	res := runTraceCmd(args...)
	os.Stderr = saved
	w.Close()
	errOut = <-read
	r.Close()
	if res.code != 0 {
		t.Fatalf("probekit trace %q: exit %d: %s%s", args, res.code, res.errOut, errOut)
	}
	return res.out, errOut + res.errOut
}

// requireHit fails unless a line of out shows probe with every one of
// want in it.
func requireHit(t *testing.T, out, probe string, want ...string) {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if !strings.Contains(line, " "+probe+" @") {
			continue
		}
		found := true
		for _, w := range want {
			found = found && strings.Contains(line, w)
		}
		if found {
			return
		}
	}
	t.Errorf("no %s hit with %q in %d bytes of output:\n%.2000s", probe, want, len(out), out)
}

func requireNoHint(t *testing.T, errOut string) {
	t.Helper()
	if strings.Contains(errOut, "saw no hit") {
		t.Errorf("a hint although the probe fired: %s", errOut)
	}
}

func TestRuntimePython(t *testing.T) {
	requireRuntime(t, "/usr/bin/python3.11")
	out, errOut := traceStderr(t, "--str", "1,2", "/usr/bin/python3.11:python:function__entry", "--",
		"/usr/bin/python3.11", "-c", "import sys; sys.setprofile(lambda *a: None)\ndef hello(): pass\nhello()")
	requireHit(t, out, "python:function__entry", `"<string>" "hello" 2`)
	requireNoHint(t, errOut)
}

func TestRuntimeRuby(t *testing.T) {
	requireRuntime(t, "/usr/bin/ruby")
	out, errOut := traceStderr(t, append(launchedLibrary(t), "--str", "1,2", "libruby-3.1.so.3.1:ruby:method__entry", "--",
		"ruby", "-e", "TracePoint.new(:call) {}.enable; def hello; end; hello")...)
	requireHit(t, out, "ruby:method__entry", `"Object" "hello"`)
	requireNoHint(t, errOut)

	// Without the TracePoint: no hit, and the hint; with -f too, where
	// the library is attached as the process maps it (it had no hint:
	// every trace without BPF cookies follows, as on 5.10).
	for _, args := range [][]string{launchedLibrary(t), {"-f"}} {
		out, errOut = traceStderr(t, append(args, "--str", "1,2", "libruby-3.1.so.3.1:ruby:method__entry", "--",
			"ruby", "-e", "def hello; end; hello")...)
		if strings.Contains(out, "ruby:method__entry") {
			t.Errorf("%v: method__entry fired without a TracePoint:\n%.2000s", args, out)
		}
		if want := "ruby:method__entry saw no hit: Ruby fires it only with a TracePoint on :call"; !strings.Contains(errOut, want) || !strings.Contains(errOut, "docs/runtimes.md") {
			t.Errorf("%v: stderr %q, want a hint %q naming docs/runtimes.md", args, errOut, want)
		}
	}
}

func TestRuntimePHP(t *testing.T) {
	requireRuntime(t, "/usr/bin/php8.2")
	out, errOut := traceStderr(t, append(launchedLibrary(t), "--str", "1,2", "php8.2:php:function__entry", "--",
		"env", "USE_ZEND_DTRACE=1", "php8.2", "-r", "function hello() {} hello();")...)
	requireHit(t, out, "php:function__entry", `"hello" "Command line code" 1`)
	requireNoHint(t, errOut)

	out, errOut = traceStderr(t, append(launchedLibrary(t), "--str", "1,2", "php8.2:php:function__entry", "--",
		"env", "-u", "USE_ZEND_DTRACE", "php8.2", "-r", "function hello() {} hello();")...)
	if strings.Contains(out, "php:function__entry") {
		t.Errorf("function__entry fired without USE_ZEND_DTRACE:\n%.2000s", out)
	}
	if want := "php:function__entry saw no hit: PHP fires it only with the environment variable USE_ZEND_DTRACE=1"; !strings.Contains(errOut, want) {
		t.Errorf("stderr %q, want a hint %q", errOut, want)
	}
}

// Hello.java for TestRuntimeJava: greet is the method to see.
const helloJava = `public class Hello {
    static int greet(int n) { return n + 1; }
    public static void main(String[] a) { System.out.println(greet(1)); }
}
`

func TestRuntimeJava(t *testing.T) {
	requireRuntime(t, jdk+"/bin/java", jdk+"/bin/javac")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "Hello.java"), []byte(helloJava), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command(jdk+"/bin/javac", "-d", dir, filepath.Join(dir, "Hello.java")).CombinedOutput(); err != nil {
		t.Fatalf("javac: %v: %s", err, b)
	}
	probe := jdk + "/lib/server/libjvm.so:hotspot:method__entry"
	out, errOut := traceStderr(t, append(launchedLibrary(t), "--str", "2,4", probe, "--", jdk+"/bin/java", "-XX:+ExtendedDTraceProbes", "-cp", dir, "Hello")...)
	// The class and method names are not NUL-terminated (a length
	// follows each): --str prints the bytes up to the next NUL.
	requireHit(t, out, "hotspot:method__entry", `"Hello`, `"greet`)
	requireNoHint(t, errOut)

	out, errOut = traceStderr(t, append(launchedLibrary(t), "--str", "2,4", probe, "--", jdk+"/bin/java", "-cp", dir, "Hello")...)
	if strings.Contains(out, "hotspot:method__entry") {
		t.Errorf("method__entry fired without -XX:+ExtendedDTraceProbes:\n%.2000s", out)
	}
	if want := "hotspot:method__entry saw no hit: OpenJDK fires it only with the JVM option -XX:+ExtendedDTraceProbes"; !strings.Contains(errOut, want) {
		t.Errorf("stderr %q, want a hint %q", errOut, want)
	}
}
