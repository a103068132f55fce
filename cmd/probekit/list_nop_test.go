package main

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/probekit/probekit/internal/test/testkit"
)

// TestListSiteLength: every location shows its NOP and how long it is,
// in words and in JSON; a bare 5-byte NOP is a usable site.
func TestListSiteLength(t *testing.T) {
	path := testkit.Fixture("usdt_nops")
	code, out, stderr := runCmd("list", path, "nops:nop5")
	if code != 0 || !strings.Contains(out, "(file offset ") || !strings.Contains(out, "  nop (5 bytes)\n") || strings.Contains(out, "UNUSABLE") {
		t.Fatalf("exit %d, %s\n%s", code, stderr, out)
	}
	code, out, stderr = runCmd("list", path, "nops:nop1")
	if code != 0 || !strings.Contains(out, "  nop (1 byte)\n") {
		t.Fatalf("exit %d, %s\n%s", code, stderr, out)
	}

	code, out, stderr = runCmd("list", "--json", path)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var doc struct {
		Probes []struct {
			Name      string `json:"name"`
			Locations []struct {
				Site       string `json:"site"`
				SiteLength int    `json:"site_length"`
				SiteError  string `json:"site_error"`
			} `json:"locations"`
		} `json:"probes"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	want := map[string]string{"nop1": "nop 1", "xchg": "nop 2", "nop3": "nop 3", "nop5": "nop 5", "nop9": "nop 9",
		"nop_nop5": "nop+nop5 6", "nop_nop10": "nop+nop10 11"}
	for _, p := range doc.Probes {
		l := p.Locations[0]
		if got := l.Site + " " + strconv.Itoa(l.SiteLength); got != want[p.Name] || l.SiteError != "" {
			t.Errorf("%s: site %q %s, want %q", p.Name, got, l.SiteError, want[p.Name])
		}
		delete(want, p.Name)
	}
	if len(want) != 0 {
		t.Errorf("probes not listed: %v", want)
	}
}
