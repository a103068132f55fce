package main

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/probekit/probekit/internal/test/testkit"
)

// list -p lists the executable's and the shared library's probes, each
// under its path, in one JSON document.
func TestListProcessJSON(t *testing.T) {
	testkit.RequireKernel(t) // reading another process's maps and root
	p := testkit.Start(t, testkit.Fixture("usdt_lib_user"))
	var out, errOut bytes.Buffer
	if code := run([]string{"list", "--json", "-p", strconv.Itoa(p.PID()), "sample:*"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var doc struct {
		PID     int `json:"pid"`
		Objects []struct {
			Path     string `json:"path"`
			HostPath string `json:"host_path"`
			Machine  string `json:"machine"`
			Probes   []struct {
				Provider  string `json:"provider"`
				Name      string `json:"name"`
				Locations []struct {
					Address    uint64 `json:"address"`
					FileOffset uint64 `json:"file_offset"`
					ArgsSpec   string `json:"args_spec"`
				} `json:"locations"`
			} `json:"probes"`
		} `json:"objects"`
	}
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if doc.PID != p.PID() || len(doc.Objects) != 2 {
		t.Fatalf("pid %d, %d objects: %s", doc.PID, len(doc.Objects), out.String())
	}
	want := map[string][]string{
		testkit.Fixture("usdt_lib_user"):  {"sample:shared"},
		testkit.Fixture("libusdt_lib.so"): {"sample:shared", "sample:libonly"},
	}
	for _, o := range doc.Objects {
		names, ok := want[o.Path]
		if !ok {
			t.Errorf("unexpected object %s", o.Path)
			continue
		}
		var got []string
		for _, pr := range o.Probes {
			got = append(got, pr.Provider+":"+pr.Name)
			if len(pr.Locations) != 1 || pr.Locations[0].FileOffset == 0 {
				t.Errorf("%s %s: locations %+v", o.Path, pr.Name, pr.Locations)
			}
		}
		if strings.Join(got, ",") != strings.Join(names, ",") {
			t.Errorf("%s: probes %v, want %v", o.Path, got, names)
		}
		if o.HostPath != o.Path || o.Machine != "x86_64" {
			t.Errorf("%s: host_path %s machine %s", o.Path, o.HostPath, o.Machine)
		}
	}

	// Text, filtered to one probe of the library.
	out.Reset()
	if code := run([]string{"list", "-p", strconv.Itoa(p.PID()), "sample:libonly"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if !strings.Contains(out.String(), "libusdt_lib.so") || strings.Contains(out.String(), "usdt_lib_user:") || !strings.Contains(out.String(), "sample:libonly") {
		t.Errorf("text listing:\n%s", out.String())
	}
}

func TestListProcessErrors(t *testing.T) {
	testkit.RequireKernel(t)
	p := testkit.Start(t, testkit.Fixture("usdt_lib_user"))
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"list", "-p", strconv.Itoa(p.PID()), "nosuch:*"}, 1, "no probe matches"},
		{[]string{"list", "-p", strconv.Itoa(p.PID()), "a", "b"}, 2, "at most a GLOB"},
		{[]string{"list", "-p", "4194304"}, 1, "gone"},
	} {
		var out, errOut bytes.Buffer
		if code := run(c.args, &out, &errOut); code != c.code || !strings.Contains(errOut.String(), c.msg) {
			t.Errorf("%v: exit %d %q, want %d %q", c.args, code, errOut.String(), c.code, c.msg)
		}
	}
}
