package probe_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/probekit/probekit/probe"
)

func TestArgNum(t *testing.T) {
	for _, tc := range []struct {
		a          probe.ArgNum
		num, index int
		str, err   string
	}{
		{probe.Arg(1), 1, 0, "arg 1", ""},
		{probe.Arg(12), 12, 11, "arg 12", ""},
		{probe.Ret(), 0, 0, "ret", ""},
		{probe.ArgNum{}, 0, -1, "no argument", "no argument"},
		{probe.Arg(0), 0, -1, "arg 0", "numbered from 1"},
		{probe.Arg(13), 0, -1, "arg 13", "argument 13: want 1 to 12"},
		{probe.Arg(-3), 0, -1, "arg -3", "argument -3: want 1 to 12"},
	} {
		err := tc.a.Check()
		if tc.a.Num() != tc.num || tc.a.Index() != tc.index || tc.a.String() != tc.str ||
			(err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: Num %d Index %d Check %v, want %d %d %q", tc.str, tc.a.Num(), tc.a.Index(), err, tc.num, tc.index, tc.err)
		}
	}
	if probe.Arg(2) != probe.Arg(2) || probe.Arg(2) == probe.Arg(3) || probe.Ret() == probe.Arg(1) {
		t.Error("ArgNum comparison")
	}
}

// TestZeroBasedDoesNotCompile builds testdata/zerobased, where each
// line writes an argument the 0-based way (a bare number, StrMask, the
// old constants), and checks that the compiler refuses every one.
func TestZeroBasedDoesNotCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program with the go command")
	}
	goCmd := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goCmd); err != nil {
		t.Skipf("no go command to compile with: %v", err)
	}
	src := filepath.Join("testdata", "zerobased", "main.go")
	f, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := map[int]string{}
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		if _, w, ok := strings.Cut(sc.Text(), `// want "`); ok {
			want[line] = strings.TrimSuffix(w, `"`)
		}
	}
	if len(want) == 0 {
		t.Fatal("no line to refuse")
	}
	// -gcflags=-e: every error, not the first ten.
	out, err := exec.Command(goCmd, "build", "-gcflags=-e", "-o", os.DevNull, "./testdata/zerobased").CombinedOutput()
	if err == nil {
		t.Fatalf("0-based arguments compiled:\n%s", out)
	}
	got := map[int]string{}
	for _, l := range strings.Split(string(out), "\n") {
		// testdata/zerobased/main.go:13:40: cannot use ...
		parts := strings.SplitN(l, ":", 4)
		if len(parts) < 4 || !strings.HasSuffix(parts[0], "main.go") {
			continue
		}
		var n int
		for _, c := range parts[1] {
			n = n*10 + int(c-'0')
		}
		got[n] += parts[3]
	}
	for line, w := range want {
		if !strings.Contains(got[line], w) {
			t.Errorf("line %d: compiler said %q, want %q\n%s", line, got[line], w, out)
		}
	}
	for line, g := range got {
		if _, ok := want[line]; !ok {
			t.Errorf("line %d: unexpected error %q", line, g)
		}
	}
}
