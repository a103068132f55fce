package python

import (
	"encoding/hex"
	"fmt"
	"os"
	"testing"

	"github.com/probekit/probekit/internal/safeelf"
)

// dwarfPythons are the interpreters on this machine with DWARF (pyenv's
// builds), by minor version.
var dwarfPythons = map[int]string{
	8:  "/root/.pyenv/versions/3.8.18/lib/libpython3.8.so.1.0",
	9:  "/root/.pyenv/versions/3.9.18/lib/libpython3.9.so.1.0",
	10: "/root/.pyenv/versions/3.10.13/lib/libpython3.10.so.1.0",
	11: "/root/.pyenv/versions/3.11.7/lib/libpython3.11.so.1.0",
	12: "/root/.pyenv/versions/3.12.1/lib/libpython3.12.so.1.0",
	13: "/root/.pyenv/versions/3.13.0/lib/libpython3.13.so.1.0",
}

// TestTableMatchesDWARF checks the table against the DWARF of every
// version on the machine, field by field.
func TestTableMatchesDWARF(t *testing.T) {
	seen := 0
	for minor, path := range dwarfPythons {
		t.Run(fmt.Sprintf("3.%d", minor), func(t *testing.T) {
			f, err := os.Open(path)
			if err != nil {
				t.Skipf("no %s", path)
			}
			defer f.Close()
			seen++
			ef, err := safeelf.NewFile(f)
			if err != nil {
				t.Fatal(err)
			}
			got, err := dwarfOffsets(ef)
			if err != nil {
				t.Fatal(err)
			}
			v := Version{3, minor, 0}
			if err := got.check(v); err != nil {
				t.Errorf("DWARF: %v", err)
			}
			want, ok := tableOffsets(v)
			if !ok {
				t.Fatalf("no table entry for %v", v)
			}
			wf := want.fields()
			for i, g := range got.fields() {
				if *g.p != *wf[i].p {
					t.Errorf("%s: DWARF %d, table %d", g.name, *g.p, *wf[i].p)
				}
			}
		})
	}
	if seen == 0 {
		t.Skip("no CPython with DWARF on this machine")
	}
}

// TestTableMatchesDebian checks the table's 3.11 entry against the DWARF
// of Debian 12's python3.11, from its debug file (python3.11-dbg).
func TestTableMatchesDebian(t *testing.T) {
	f, err := os.Open("/usr/bin/python3.11")
	if err != nil {
		t.Skip("no /usr/bin/python3.11")
	}
	defer f.Close()
	ef, err := safeelf.NewFile(f)
	if err != nil {
		t.Fatal(err)
	}
	id, err := ef.BuildID()
	if err != nil || len(id) < 2 {
		t.Fatalf("build ID %x: %v", id, err)
	}
	h := hex.EncodeToString(id)
	df, err := os.Open("/usr/lib/debug/.build-id/" + h[:2] + "/" + h[2:] + ".debug")
	if err != nil {
		t.Skip("no debug file of /usr/bin/python3.11 (python3.11-dbg)")
	}
	defer df.Close()
	def, err := safeelf.NewFile(df)
	if err != nil {
		t.Fatal(err)
	}
	got, err := dwarfOffsets(def)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := tableOffsets(Version{3, 11, 2})
	wf := want.fields()
	for i, g := range got.fields() {
		if *g.p != *wf[i].p {
			t.Errorf("%s: Debian's DWARF %d, table %d", g.name, *g.p, *wf[i].p)
		}
	}
}
