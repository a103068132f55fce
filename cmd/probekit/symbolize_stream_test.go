package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/procmaps"
)

// streamRun runs probekit with args reading stdin from a pipe; it returns
// the pipe's writer, the output and a channel with the exit code.
func streamRun(t *testing.T, args ...string) (*io.PipeWriter, *testkit.Buffer, *testkit.Buffer, chan int) {
	t.Helper()
	pr, pw := io.Pipe()
	symbolizeStdin = pr
	t.Cleanup(func() { pw.Close(); symbolizeStdin = os.Stdin })
	out, errb := &testkit.Buffer{}, &testkit.Buffer{}
	done := make(chan int, 1)
	go func() { done <- run(args, out, errb) }()
	return pw, out, errb, done
}

// waitOutput waits until out contains want, by deadline.
func waitOutput(t *testing.T, out *testkit.Buffer, want string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(out.String(), want); {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the output after 5 s (the command waits for its input's end?): %q", want, out.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestSymbolizeStreams (issue 21 item 9): an address written to stdin is
// answered before more input comes; a bad line gets an error line in its
// place while the lines after it are still named; the command then exits
// 1 saying how many lines were bad.
func TestSymbolizeStreams(t *testing.T) {
	path := testkit.Fixture("usdt_sample")
	pw, out, errb, done := streamRun(t, "symbolize", "-e", path)
	fmt.Fprintln(pw, "10d5")
	waitOutput(t, out, "0x10d5 main+0x5")
	fmt.Fprintln(pw, "not-hex")
	fmt.Fprintln(pw, "0x14f0")
	pw.Close()
	code := <-done
	want := "0x10d5 main+0x5\nerror: stdin line 2: invalid address \"not-hex\": want hexadecimal\n0x14f0 fire_consts+0x0\n"
	if code != 1 || out.String() != want || !strings.Contains(errb.String(), "1 of 3 lines") {
		t.Fatalf("exit %d, output %q, want %q; stderr %s", code, out.String(), want, errb.String())
	}
}

// TestSymbolizeStreamsJSONErrors: among 2,000 good addresses one bad line
// gets {"error","input_line"} and the others are all named.
func TestSymbolizeStreamsJSONErrors(t *testing.T) {
	path := testkit.Fixture("usdt_sample")
	var in strings.Builder
	for i := range 2000 {
		if i == 1000 {
			in.WriteString("0xzz\n")
		}
		in.WriteString("10d5\n")
	}
	symbolizeStdin = strings.NewReader(in.String())
	defer func() { symbolizeStdin = os.Stdin }()
	code, out, stderr := runCmd("symbolize", "--json", "-e", path)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if code != 1 || len(lines) != 2001 || !strings.Contains(stderr, "1 of 2001 lines") {
		t.Fatalf("exit %d, %d lines, %s", code, len(lines), stderr)
	}
	if lines[1000] != `{"error":"stdin line 1001: invalid address \"0xzz\": want hexadecimal","input_line":1001}` {
		t.Fatalf("line 1001: %s", lines[1000])
	}
	if !strings.Contains(lines[1001], `"function":"main"`) || !strings.Contains(lines[2000], `"function":"main"`) {
		t.Fatalf("after the bad line: %s / %s", lines[1001], lines[2000])
	}
}

// TestSymbolizeStreamProcessExits: a process that exits mid-stream ends
// the command with its error, and the frames printed before stay.
func TestSymbolizeStreamProcessExits(t *testing.T) {
	exe, err := filepath.Abs(testkit.Fixture("usdt_lib_user"))
	if err != nil {
		t.Fatal(err)
	}
	fx := testkit.Start(t, exe)
	pp, err := procmaps.Open(fx.PID())
	if err != nil {
		t.Fatal(err)
	}
	_, off := testkit.SymbolOffset(t, exe, "main")
	obj, err := pp.Object(idOf(t, exe))
	if err != nil {
		t.Fatal(err)
	}
	a, err := obj.Address(off, procmaps.Exec)
	if err != nil {
		t.Fatal(err)
	}
	pw, out, errb, done := streamRun(t, "symbolize", "-p", strconv.Itoa(fx.PID()))
	fmt.Fprintf(pw, "%x\n", a+3)
	waitOutput(t, out, "main+0x3")
	fx.Kill()
	fmt.Fprintf(pw, "%x\n", a+4)
	pw.Close()
	code := <-done
	if code != 1 || !strings.Contains(errb.String(), "gone") || !strings.Contains(out.String(), "main+0x3") || strings.Contains(out.String(), "main+0x4") {
		t.Fatalf("exit %d, output %q, stderr %s", code, out.String(), errb.String())
	}
}

// TestSymbolizeInlinedJSON: --json gives a frame per inlined call with
// "file", "line" and "inlined", innermost first (scale from a header,
// inlined into inner, mid and outer of the DWARF 5 C fixture).
func TestSymbolizeInlinedJSON(t *testing.T) {
	path := filepath.Join("..", "..", "testdata", "lines", "bin", "lines_c_v5")
	start, _ := testkit.SymbolOffset(t, path, "outer")
	var in strings.Builder
	for a := start; a < start+64; a++ {
		fmt.Fprintf(&in, "%x\n", a)
	}
	symbolizeStdin = strings.NewReader(in.String())
	defer func() { symbolizeStdin = os.Stdin }()
	code, out, stderr := runCmd("symbolize", "--json", "-e", path)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	want := `"function":"scale","offset":0,"object":"` + path + `","file":"lines_inline.h","line":4,"inlined":true}`
	if !strings.Contains(out, want) || !strings.Contains(out, `"function":"mid"`) || !strings.Contains(out, `"file":"lines.c","line":`) {
		t.Fatalf("no inline chain with %s in:\n%s", want, out)
	}
}
