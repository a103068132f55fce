package main

import (
	"context"
	"os"
	"testing"

	"github.com/probekit/probekit/internal/test/testkit"
)

func TestMain(m *testing.M) { os.Exit(testkit.RunWithLeakCheck(m)) }

const python = "/usr/bin/python3.11"

// A script that sets a profile function calls hello 37 times: each call
// is counted under its file and name, read through Hit.Str(probe.Arg(N)).
func TestCount(t *testing.T) {
	testkit.RequireKernel(t)
	if _, err := os.Stat(python); err != nil {
		testkit.Unavailable(t, "%s: %v", python, err)
	}
	calls, err := count(context.Background(), []string{python, "-c",
		"import sys\nsys.setprofile(lambda *a: None)\ndef hello(): pass\nfor _ in range(37): hello()\n"})
	if err != nil {
		t.Fatal(err)
	}
	if n := calls["<string>:hello"]; n != 37 {
		t.Errorf("<string>:hello counted %d times, want 37 (%d keys)", n, len(calls))
	}
}
