package debuginfo

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/procmaps"
)

// TestContainerDebugFile: the debug file of a container's library lives
// only inside the container's root, under its /usr/lib/debug/.build-id;
// Find, given the process, opens it there (InRoot), and without the
// process does not see it (the host has none).
func TestContainerDebugFile(t *testing.T) {
	fx, root := testkit.StartContainer(t)
	const lib = "/app/libusdt_lib.so"
	id := testkit.BuildID(t, filepath.Join(root, lib))
	debugPath := filepath.Join("/usr/lib/debug/.build-id", id[:2], id[2:]+".debug")
	testkit.CopyFile(t, "", filepath.Join(root, debugPath))
	if out, err := exec.Command("objcopy", "--only-keep-debug", filepath.Join(root, lib), filepath.Join(root, debugPath)).CombinedOutput(); err != nil {
		t.Fatalf("objcopy: %v\n%s", err, out)
	}
	p, err := procmaps.Open(fx.PID())
	if err != nil {
		t.Fatal(err)
	}
	obj, err := p.OpenInRoot(lib)
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	d, err := Find(obj, lib, &Options{Process: p, Offline: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.Source != SourceBuildID || !d.InRoot || d.Path != debugPath {
		t.Fatalf("found %s at %s (in root %v), want build-id at %s inside the root", d.Source, d.Path, d.InRoot, debugPath)
	}
	// The host's debug directories do not have it: without the process
	// the library (unstripped, no DWARF) is its own best file.
	h, err := Find(obj, lib, &Options{Offline: true})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if h.Source != SourceSelf {
		t.Fatalf("on the host: found %s at %s", h.Source, h.Path)
	}
	// A debug file in the root not owned by the process's user or root
	// is refused: here, writable by others.
	if err := os.Chmod(filepath.Join(root, debugPath), 0o666); err != nil {
		t.Fatal(err)
	}
	var warns []error
	d2, err := Find(obj, lib, &Options{Process: p, Offline: true, Warn: func(e error) { warns = append(warns, e) }})
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	if d2.Source != SourceSelf || len(warns) != 1 || !errors.Is(warns[0], procmaps.ErrNotOwned) {
		t.Fatalf("world-writable debug file: found %s, warnings %v", d2.Source, warns)
	}
}
