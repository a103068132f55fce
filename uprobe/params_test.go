package uprobe

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/probekit/probekit/debuginfo"
)

// Two Binaries of one file share the DWARF read for Params; a file
// rewritten since (another modification time) is read again.
func TestParamsShareDWARF(t *testing.T) {
	dir := t.TempDir()
	src, err := os.ReadFile("../testdata/params/bin/params_O2")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "params")
	if err := os.WriteFile(path, src, 0o755); err != nil {
		t.Fatal(err)
	}
	sigs := func() *debuginfo.Signatures {
		t.Helper()
		b, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		fn, err := b.Function("emit")
		if err != nil {
			t.Fatal(err)
		}
		sig, err := b.Params(fn)
		if err != nil || len(sig.Params) != 2 || sig.Params[1].Name != "name" {
			t.Fatalf("emit: %+v, %v", sig, err)
		}
		s, _ := b.signatures()
		return s
	}
	first := sigs()
	if sigs() != first {
		t.Error("a second Binary of the file read its DWARF again")
	}
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(path, later, later); err != nil {
		t.Fatal(err)
	}
	if sigs() == first {
		t.Error("a file modified since was not read again")
	}
}

// A file without DWARF (and no debug file) is ErrNoDWARF; after Close,
// a Binary that never read its DWARF says so too.
func TestParamsNoDWARF(t *testing.T) {
	b, err := Open("../testdata/bin/func_args")
	if err != nil {
		t.Fatal(err)
	}
	fn, err := b.Function("sum6")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Params(fn); !errors.Is(err, ErrNoDWARF) {
		t.Errorf("func_args (-g0): %v, want ErrNoDWARF", err)
	}
	b.Close()
	c, err := Open("../testdata/params/bin/params_O2")
	if err != nil {
		t.Fatal(err)
	}
	fn, err = c.Function("emit")
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if _, err := c.Params(fn); !errors.Is(err, ErrNoDWARF) {
		t.Errorf("after Close: %v, want ErrNoDWARF", err)
	}
}

// A binary through dwz -m (its names and types in the common file
// .gnu_debugaltlink or .debug_sup names) gives every function's
// parameters as the binary before dwz does.
func TestParamsSup(t *testing.T) {
	params := func(path string) []*debuginfo.Signature {
		t.Helper()
		b, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		var out []*debuginfo.Signature
		for _, name := range []string{"emit", "mix", "byval", "label", "shapes", "twice"} {
			fn, err := b.Function(name)
			if err != nil {
				t.Fatal(err)
			}
			sig, err := b.Params(fn)
			if err != nil {
				t.Fatalf("%s: %s: %v", path, name, err)
			}
			out = append(out, sig)
		}
		return out
	}
	want := params("../testdata/params/bin/params_O2")
	for _, name := range []string{"params_dwz", "params_dwz5"} {
		got := params("../testdata/params/bin/" + name)
		for i := range want {
			if !reflect.DeepEqual(got[i], want[i]) {
				t.Errorf("%s: %s:\n got %+v\nwant %+v", name, want[i].Name, got[i], want[i])
			}
		}
	}
}
