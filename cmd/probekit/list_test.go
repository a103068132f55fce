package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/probekit/probekit/internal/test/testkit"
)

// TestMain: this test binary, copied under the name probekit
// (buildProbekit), is the command itself; otherwise it runs the tests.
func TestMain(m *testing.M) {
	if filepath.Base(os.Args[0]) == "probekit" {
		main()
	}
	code := testkit.RunWithLeakCheck(m)
	removeBuilt()
	os.Exit(code)
}

func runCmd(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestListJSON(t *testing.T) {
	path := testkit.Fixture("usdt_sample")
	code, out, stderr := runCmd("list", "--json", path)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var doc struct {
		Path    string `json:"path"`
		Machine string `json:"machine"`
		Probes  []struct {
			Provider  string           `json:"provider"`
			Name      string           `json:"name"`
			Locations []map[string]any `json:"locations"`
		} `json:"probes"`
	}
	dec := json.NewDecoder(strings.NewReader(out))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if doc.Path != path || doc.Machine != "x86_64" || len(doc.Probes) != 10 {
		t.Fatalf("doc %s %s %d probes", doc.Path, doc.Machine, len(doc.Probes))
	}
	byName := map[string][]map[string]any{}
	for _, p := range doc.Probes {
		byName[p.Provider+":"+p.Name] = p.Locations
	}
	sema := byName["sample:sema"][0]
	for _, k := range []string{"address", "file_offset", "base", "semaphore", "semaphore_offset"} {
		n, ok := sema[k].(json.Number)
		if _, err := n.Int64(); !ok || err != nil {
			t.Errorf("sample:sema %s = %#v, want an integer", k, sema[k])
		}
	}
	if _, ok := byName["sample:zero"][0]["semaphore"]; ok {
		t.Error("semaphore present on a probe without one")
	}
	if _, ok := byName["sample:zero"][0]["args"]; ok {
		t.Error("args present on a probe without arguments")
	}
	if len(byName["sample:inlined"]) != 3 {
		t.Errorf("sample:inlined: %d locations", len(byName["sample:inlined"]))
	}
	// The SIB argument of sample:sib: -4@(%rdi,%rsi,4).
	args := byName["sample:sib"][0]["args"].([]any)
	sib := args[0].(map[string]any)
	want := map[string]any{"spec": "-4@(%rdi,%rsi,4)", "size": json.Number("4"), "signed": true, "kind": "sib",
		"register": "rdi", "index_register": "rsi", "scale": json.Number("4"), "offset": json.Number("0")}
	if len(sib) != len(want) {
		t.Errorf("sib arg %v, want %v", sib, want)
	}
	for k, v := range want {
		if sib[k] != v {
			t.Errorf("sib arg %s = %#v, want %#v", k, sib[k], v)
		}
	}
	consts := byName["sample:consts"][0]["args"].([]any)
	if c := consts[1].(map[string]any); c["kind"] != "const" || c["value"] != json.Number("-9") {
		t.Errorf("consts arg 2: %v", c)
	}
}

func TestListText(t *testing.T) {
	code, out, stderr := runCmd("list", testkit.Fixture("usdt_sample"), "sample:s*")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		"x86_64 64-bit little-endian, 3 probes, 3 locations",
		"sample:sema  1 location, semaphore",
		"arg 1: 4 bytes signed, memory at rdi + rsi*4  (-4@(%rdi,%rsi,4))",
		"arg 1: 1 byte signed, register dil  (-1@%dil)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "sample:mem") {
		t.Error("glob not applied")
	}
}

func TestListErrors(t *testing.T) {
	notELF := filepath.Join(t.TempDir(), "script")
	os.WriteFile(notELF, []byte("#!/bin/sh\n"), 0o755)
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"list"}, 2, "want TARGET"},
		{[]string{"list", "a", "b", "c"}, 2, "want TARGET"},
		{[]string{"list", "--bogus", "x"}, 2, "flag provided but not defined"},
		{[]string{"list", "/nonexistent/file"}, 1, "no such file"},
		{[]string{"list", "no-such-program-or-library.so.9"}, 1, "not on PATH"},
		{[]string{"list", notELF}, 1, "not an ELF file"},
		{[]string{"list", testkit.Fixture("malloc_user")}, 1, "no USDT probes"},
		{[]string{"list", testkit.Fixture("usdt_sample"), "nope:*"}, 1, "no probe matches"},
		{[]string{"frobnicate"}, 2, "unknown command"},
	} {
		code, _, stderr := runCmd(c.args...)
		if code != c.code || !strings.Contains(stderr, c.msg) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", c.args, code, stderr, c.code, c.msg)
		}
	}
}

func TestFlagsAfterTarget(t *testing.T) {
	code, out, stderr := runCmd("list", testkit.Fixture("usdt_sample"), "--json", "sample:zero")
	if code != 0 || !strings.HasPrefix(out, "{") || !strings.Contains(out, `"name": "zero"`) {
		t.Errorf("exit %d %s %s", code, out, stderr)
	}
}
