package uprobe

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/probekit/probekit/debuginfo"
	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/procmaps"
)

// In a container, a path is resolved inside the process's root, symlinks
// included: an absolute symlink and one that climbs with ".." both reach
// the container's copy of the library, and the host's file of the same
// name is never opened, so a container cannot steer the tracer onto a
// host binary.
func TestContainerSymlinksStayInRoot(t *testing.T) {
	testkit.RequireKernel(t)
	fx, root := testkit.StartContainer(t)
	host, err := filepath.Abs(testkit.Fixture("libusdt_lib.so"))
	if err != nil {
		t.Fatal(err)
	}
	hostID, err := procmaps.IDOf(host)
	if err != nil {
		t.Fatal(err)
	}
	// The container's library also answers, inside the container, to the
	// host library's path (a hard link), which the symlinks name.
	inRoot := filepath.Join(root, host)
	if err := os.MkdirAll(filepath.Dir(inRoot), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(root, "app/libusdt_lib.so"), inRoot); err != nil {
		t.Fatal(err)
	}
	containerID, err := procmaps.IDOf(inRoot)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(host, filepath.Join(root, "app/abs.so")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../../../../../../.."+host, filepath.Join(root, "app/dots.so")); err != nil {
		t.Fatal(err)
	}

	prog, m := recorder(t, regRDI, regRDI)
	for i, link := range []string{"/app/abs.so", "/app/dots.so"} {
		b, err := OpenProcess(processOf(t, fx.PID()), link)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		if b.target.ID != containerID || b.target.ID == hostID {
			t.Fatalf("%s opened %v; the container's library is %v, the host's %v", link, b.target.ID, containerID, hostID)
		}
		cookie := uint64(100 + i)
		l, err := b.Entry("usdt_lib_fire_libonly", prog, &Options{Cookie: cookie})
		if err != nil {
			t.Fatal(err)
		}
		fx.Fire("libonly", 2) // usdt_lib_fire_libonly(0, ...), (1, ...)
		l.Close()
		got := hits(t, m, cookie)
		for r := uint64(0); r < 2; r++ {
			if got[[2]uint64{r, r}] != 1 || len(got) != 2 {
				t.Errorf("%s: round %d seen %d times in %v", link, r, got[[2]uint64{r, r}], got)
			}
		}
	}
}

// In a container, the dwz common file a binary's DWARF names (a name
// relative to the binary's directory) is found inside the process's
// root, where the host has no such file: Params reads the names and
// types kept there as the binary before dwz gives them.
func TestContainerParamsSup(t *testing.T) {
	testkit.RequireKernel(t)
	fx, root := testkit.StartContainer(t)
	for _, n := range []string{"params_dwz", "params_dwz.sup"} {
		testkit.CopyFile(t, "../testdata/params/bin/"+n, filepath.Join(root, "app", n))
	}
	if _, err := os.Stat("/app/params_dwz.sup"); err == nil {
		t.Fatal("the host has /app/params_dwz.sup: where the common file was found cannot be told")
	}
	sig := func(b *Binary) *debuginfo.Signature {
		t.Helper()
		defer b.Close()
		fn, err := b.Function("mix")
		if err != nil {
			t.Fatal(err)
		}
		s, err := b.Params(fn)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	plain, err := Open("../testdata/params/bin/params_O2")
	if err != nil {
		t.Fatal(err)
	}
	want := sig(plain)
	b, err := OpenProcess(processOf(t, fx.PID()), "/app/params_dwz")
	if err != nil {
		t.Fatal(err)
	}
	if got := sig(b); !reflect.DeepEqual(got, want) {
		t.Fatalf("in the container:\n got %+v\nwant %+v", got, want)
	}
}
