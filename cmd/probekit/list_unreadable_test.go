package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/usdt"
)

// listNobodyEnv carries, to the test binary re-run as nobody, the path of
// a fixture copy it may run.
const listNobodyEnv = "PROBEKIT_LIST_NOBODY_FIXTURE"

// TestListAllUnreadable: list '*' as an unprivileged user says how many
// processes it could not read and why, both when it finds nothing (it
// said "no object mapped on this host has USDT probes") and next to what
// it lists.
func TestListAllUnreadable(t *testing.T) {
	testkit.RequireKernel(t) // root, to run the helper as nobody
	// The test binary and the fixture sit in directories nobody may not
	// enter: copies in one it may.
	dir := testkit.SharedTempDir(t)
	bin := filepath.Join(dir, "probekit.test")
	fx := filepath.Join(dir, "usdt_sample")
	testkit.CopyFile(t, os.Args[0], bin)
	testkit.CopyFile(t, testkit.Fixture("usdt_sample"), fx)
	cmd := exec.Command(bin, "-test.run=^TestListAllUnreadableHelper$", "-test.v")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), listNobodyEnv+"="+fx)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	got, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(got), "--- PASS: TestListAllUnreadableHelper") {
		t.Fatalf("as nobody: %v\n%s", err, got)
	}
	// Next to what it lists, on stderr.
	if !strings.Contains(string(got), "probekit list: warning: ") || !strings.Contains(string(got), "could not be read: permission denied") {
		t.Fatalf("as nobody, listing its own fixture: no warning about unreadable processes\n%s", got)
	}
}

func TestListAllUnreadableHelper(t *testing.T) {
	fx := os.Getenv(listNobodyEnv)
	if fx == "" {
		t.Skip("run by TestListAllUnreadable")
	}
	// Nothing of nobody's has probes: the error says why it may have
	// missed some.
	var out bytes.Buffer
	err := listAll(&out, "", false)
	if !errors.Is(err, usdt.ErrNoProbes) || !strings.Contains(err.Error(), "could not be read: permission denied") || !strings.Contains(err.Error(), "processes read") {
		t.Fatalf("list '*' as uid %d: %v, want ErrNoProbes counting the unreadable processes", os.Getuid(), err)
	}
	t.Log(err)
	// Its own fixture is listed, and the JSON document counts the others.
	testkit.Start(t, fx)
	out.Reset()
	if err := listAll(&out, "sample:zero", true); err != nil {
		t.Fatalf("list '*' as uid %d with its own fixture running: %v", os.Getuid(), err)
	}
	var doc struct {
		Unreadable int `json:"unreadable_processes"`
		Objects    []struct {
			Path string `json:"path"`
		} `json:"objects"`
	}
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Objects) != 1 || doc.Objects[0].Path != fx || doc.Unreadable == 0 {
		t.Fatalf("objects %+v, %d unreadable; want %s and a count", doc.Objects, doc.Unreadable, fx)
	}
	t.Logf("%d processes unreadable", doc.Unreadable)
}
