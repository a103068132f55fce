package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/probekit/probekit/internal/features"
	"github.com/probekit/probekit/internal/test/testkit"
)

// A launched shell that runs the target in a child, without -f: no hit,
// and the hint says the child was not followed, not what the runtime
// needs (the script sets a profile function).
func TestTraceNotFollowedHint(t *testing.T) {
	testkit.RequireKernel(t)
	fx := testkit.Fixture("usdt_sample")
	// "; true": the shell stays the parent instead of exec'ing.
	cookies, err := features.Have(features.Cookie)
	if err != nil {
		t.Fatal(err)
	}
	if cookies {
		out, errOut := traceStderr(t, fx+":sample:loop", "--", "sh", "-c", fx+" --loop loop 3; true")
		want := "probekit trace: sample:loop saw no hit: sh is not " + fx + ", so only a child could run it, and a child is not followed: add -f"
		if out != "" || !strings.Contains(errOut, want) {
			t.Errorf("stdout %q, stderr %q; want no hit and %q", out, errOut, want)
		}
	} else {
		// Without BPF cookies a PIE that the launched command has not
		// mapped is refused at once, with the same advice.
		r := runTraceCmd(fx+":sample:loop", "--", "sh", "-c", fx+" --loop loop 3; true")
		if r.code != 1 || !strings.Contains(r.errOut, features.Cookie.String()) || !strings.Contains(r.errOut, "with -f") {
			t.Errorf("without cookies: exit %d, stderr %q; want a refusal naming BPF cookies and -f", r.code, r.errOut)
		}
	}
	// The program itself, launched: its hits, no hint.
	out, errOut := traceStderr(t, fx+":sample:loop", "--", fx, "--loop", "loop", "3")
	if strings.Count(out, "sample:loop") != 3 || strings.Contains(errOut, "add -f") {
		t.Errorf("stdout %q, stderr %q; want 3 hits and no hint", out, errOut)
	}

	requireRuntime(t, "/usr/bin/python3.11")
	script := filepath.Join(t.TempDir(), "a.py")
	if err := os.WriteFile(script, []byte("import sys\nsys.setprofile(lambda *a: None)\ndef f(): pass\nf()\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errOut = traceStderr(t, "/usr/bin/python3.11:python:function__entry", "--", "sh", "-c", "/usr/bin/python3.11 "+script+"; true")
	if !strings.Contains(errOut, "python:function__entry saw no hit: sh is not /usr/bin/python3.11") || strings.Contains(errOut, "CPython fires") {
		t.Errorf("stderr %q, want the not-followed hint alone", errOut)
	}
}
