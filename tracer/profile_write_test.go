package tracer

import (
	"os"
	"path/filepath"
	"testing"

	pprof "github.com/google/pprof/profile"

	"github.com/probekit/probekit/profile"
)

type noNames struct{}

func (noNames) Locate(_ uint32, addrs []uint64) ([]profile.Location, error) {
	return make([]profile.Location, len(addrs)), nil
}

// --pprof's file replaces a symbolic link at its path (one planted in
// a shared directory) instead of writing through it, and is a whole
// profile that go tool pprof's parser reads back. os.Create followed
// the link and truncated its target.
func TestWriteProfileSymlink(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "out.pprof")
	if err := os.Symlink(victim, path); err != nil {
		t.Fatal(err)
	}
	p, err := profile.Build([]profile.Stack{{PID: 1, Frames: []uint64{0x1000}, Count: 3}}, noNames{}, nil)
	if p == nil {
		t.Fatal(err)
	}
	if err := writeProfile(path, p); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "precious" {
		t.Errorf("the link's target holds %q", b)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if st, _ := os.Lstat(path); !st.Mode().IsRegular() {
		t.Errorf("path is %v", st.Mode())
	}
	back, err := pprof.Parse(f)
	if err != nil || len(back.Sample) != 1 || back.Sample[0].Value[0] != 3 {
		t.Fatalf("read back: %v, %v", back, err)
	}
}
