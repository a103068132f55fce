package python

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// linePythons are the interpreters whose line tables are checked.
var linePythons = []struct {
	name  string
	minor int
	path  string
}{
	{"3.8", 8, "/root/.pyenv/versions/3.8.18/bin/python3.8"},
	{"3.9", 9, "/root/.pyenv/versions/3.9.18/bin/python3.9"},
	{"3.10", 10, "/root/.pyenv/versions/3.10.13/bin/python3.10"},
	{"3.11", 11, "/root/.pyenv/versions/3.11.7/bin/python3.11"},
	{"debian-3.11", 11, "/usr/bin/python3.11"},
	{"3.12", 12, "/root/.pyenv/versions/3.12.1/bin/python3.12"},
	{"3.13", 13, "/root/.pyenv/versions/3.13.0/bin/python3.13"},
}

// TestLineTables decodes the line tables of testdata/python/lines.py's
// sample module (short and long jumps, lines with no location, more than
// 70,000 lines) as each Python compiled them, and compares the line of
// every instruction with the one that Python gives itself.
func TestLineTables(t *testing.T) {
	script := filepath.Join("..", "..", "testdata", "python", "lines.py")
	for _, py := range linePythons {
		t.Run(py.name, func(t *testing.T) {
			if _, err := os.Stat(py.path); err != nil {
				t.Skipf("no %s", py.path)
			}
			minor := py.minor
			out, err := exec.Command(py.path, script).Output()
			if err != nil {
				t.Fatal(err)
			}
			sc := bufio.NewScanner(bytes.NewReader(out))
			sc.Buffer(nil, 16<<20)
			codes := 0
			for sc.Scan() {
				var c struct {
					Name  string `json:"name"`
					First int    `json:"first"`
					Table string `json:"table"`
					Lines []int  `json:"lines"`
				}
				if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
					t.Fatal(err)
				}
				tab, err := hex.DecodeString(c.Table)
				if err != nil {
					t.Fatal(err)
				}
				codes++
				bad := 0
				for i, want := range c.Lines {
					var got int
					switch {
					case minor >= 11:
						got = lineLocations(tab, c.First, uint32(2*i))
					case minor == 10:
						got = lineTable310(tab, c.First, uint32(2*i))
					default:
						got = lineLnotab(tab, c.First, uint32(2*i))
					}
					if got != want && bad < 5 {
						t.Errorf("%s: offset %d: line %d, want %d", c.Name, 2*i, got, want)
						bad++
					}
				}
			}
			if codes < 8 {
				t.Errorf("%d code objects, want at least 8", codes)
			}
		})
	}
}
