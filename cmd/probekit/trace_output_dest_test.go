package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/probekit/probekit/internal/test/testkit"
)

// trace -f in text form: the attach and detach lines go to standard
// error, the hits alone to standard output (or to -o FILE); --json keeps
// them as objects among the hits.
func TestTraceFollowNoticesStderr(t *testing.T) {
	testkit.RequireKernel(t)
	requireAMD64(t)
	fx := testkit.Fixture("func_args")
	hit := regexp.MustCompile(`^\d+/\d+ uprobe:sum6 @0x[0-9a-f]+ \[\d -2 300 -40000 5000000000 -6000000000\]$`)
	notice := regexp.MustCompile(`(?m)^attach \d+ \S*func_args uprobe:sum6 \(1 sites\)$`)
	checkHits := func(what, out string) {
		t.Helper()
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 3 {
			t.Fatalf("%s: %q, want 3 hits", what, out)
		}
		for _, l := range lines {
			if !hit.MatchString(l) {
				t.Errorf("%s: line %q, want a hit of sum6", what, l)
			}
		}
	}
	out, errOut := traceStderr(t, "-f", "uprobe:"+fx+":sum6", "--", fx, "3")
	checkHits("stdout", out)
	if !notice.MatchString(errOut) {
		t.Errorf("stderr %q, want the attach line", errOut)
	}

	file := filepath.Join(t.TempDir(), "out")
	out, errOut = traceStderr(t, "-o", file, "-f", "uprobe:"+fx+":sum6", "--", fx, "3")
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if out != "" || !notice.MatchString(errOut) {
		t.Errorf("-o: stdout %q, stderr %q; want nothing, and the attach line", out, errOut)
	}
	checkHits("-o file", string(b))

	// --json -o: the notices are objects in the file, among the hits.
	out, _ = traceStderr(t, "--json", "-o", file, "-f", "uprobe:"+fx+":sum6", "--", fx, "3")
	if b, err = os.ReadFile(file); err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, l := range decodeFollow(t, string(b)) {
		n[l.Kind]++
	}
	if out != "" || n["attach"] != 1 || n["uprobe"] != 3 || n["detach"] != 1 {
		t.Errorf("--json -o: stdout %q, file %s; want an attach, 3 hits and a detach in the file", out, b)
	}
}
