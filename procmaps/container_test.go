package procmaps

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/probekit/probekit/internal/test/testkit"
	"golang.org/x/sys/unix"
)

func TestContainer(t *testing.T) {
	testkit.RequireKernel(t)
	fx, root := testkit.StartContainer(t)
	pid := fx.PID()
	hostLib := filepath.Join(root, "app", "libusdt_lib.so")
	id, err := IDOf(hostLib)
	if err != nil {
		t.Fatal(err)
	}

	proc, objs, err := Objects(pid)
	if err != nil {
		t.Fatal(err)
	}
	// maps names the library as the container sees it; only the root
	// reaches it from here.
	o := objectByPath(t, objs, "/app/libusdt_lib.so")
	if o.ID() != id {
		t.Fatalf("library identity %v, host file %v", o.ID(), id)
	}
	if want := fmt.Sprintf("/proc/%d/root/app/libusdt_lib.so", pid); o.HostPath != want {
		t.Fatalf("HostPath %q, want %q", o.HostPath, want)
	}
	checkFileID(t, openPath(t, o.HostPath), id)
	f, err := proc.OpenObject(o)
	if err != nil {
		t.Fatal(err)
	}
	checkFileID(t, f, id)

	// Found by inode under the host's name for it.
	pids, _, err := FindPIDs(hostLib)
	if err != nil || !slices.Contains(pids, pid) {
		t.Fatalf("FindPIDs(%s) = %v, %v; want %d among them", hostLib, pids, err, pid)
	}

	// Address translation inside the container.
	_, off := symbolOffset(t, hostLib, "usdt_lib_fire_libonly")
	addr, err := o.Address(off, Exec)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := readMem(t, pid, addr, 32), readFileAt(t, hostLib, off, 32); !bytes.Equal(got, want) {
		t.Fatalf("memory at %#x is % x, file at %#x is % x", addr, got, off, want)
	}
	if hits := fx.Fire("libonly", 1); len(hits) != 1 || hits[0].Args[0] != 0 {
		t.Fatalf("fixture in the container: %+v", hits)
	}
}

func TestContainerSymlinks(t *testing.T) {
	testkit.RequireKernel(t)
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("host only"), 0o600); err != nil {
		t.Fatal(err)
	}
	fx, root := testkit.StartContainer(t)
	climb := strings.Repeat("../", 20) + strings.TrimPrefix(secret, "/")
	for name, target := range map[string]string{
		"abs.so": "/app/libusdt_lib.so", // absolute, meant inside the container
		"rel.so": "libusdt_lib.so",
		"escape": secret, // absolute, would name a host file from here
		"climb":  climb,  // "..": climbs above the container's root
		"magic":  "/proc/self/root" + secret,
	} {
		if err := os.Symlink(target, filepath.Join(root, "app", name)); err != nil {
			t.Fatal(err)
		}
	}
	proc, err := Open(fx.PID())
	if err != nil {
		t.Fatal(err)
	}
	libID, err := IDOf(filepath.Join(root, "app", "libusdt_lib.so"))
	if err != nil {
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("/proc/%d/root", fx.PID())
	for _, path := range []string{"/app/abs.so", "/app/rel.so", "app/abs.so", prefix + "/app/abs.so", "/../../app/abs.so"} {
		f, err := proc.OpenInRoot(path)
		if err != nil {
			t.Errorf("OpenInRoot(%s): %v", path, err)
			continue
		}
		checkFileID(t, f, libID)
	}

	// The premise: naively, the link escapes to the host.
	if data, err := os.ReadFile(prefix + "/app/escape"); err != nil || string(data) != "host only" {
		t.Fatalf("naive open through %s/app/escape: %q, %v; the test expects it to reach the host file", prefix, data, err)
	}
	for _, path := range []string{"/app/escape", "/app/climb", "/" + climb, "/app/magic"} {
		f, err := proc.OpenInRoot(path)
		if err == nil {
			data, _ := io.ReadAll(f)
			f.Close()
			t.Errorf("OpenInRoot(%s) escaped the container: read %q", path, data)
			continue
		}
		if !errors.Is(err, os.ErrNotExist) && !errors.Is(err, unix.ELOOP) {
			t.Errorf("OpenInRoot(%s): %v, want not found (or ELOOP for a magic link)", path, err)
		}
	}
}

func openPath(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// checkFileID checks f's identity and closes it.
func checkFileID(t *testing.T, f *os.File, id FileID) {
	t.Helper()
	defer f.Close()
	if err := checkIdentity(f, id); err != nil {
		t.Error(err)
	}
}

// TestChroot: a process that chroot()ed without a mount namespace of its
// own has maps paths outside its root (the kernel prints them from the
// namespace's root). The object is still opened, by the path from our
// root, and checked by identity.
func TestChroot(t *testing.T) {
	testkit.RequireKernel(t)
	if _, err := exec.LookPath("chroot"); err != nil {
		testkit.Unavailable(t, "chroot: %v", err)
	}
	root := testkit.ContainerRoot(t)
	t.Setenv("LD_LIBRARY_PATH", "/app") // $ORIGIN needs /proc in the root
	fx := testkit.Start(t, "chroot", root, "/app/usdt_lib_user")
	hostLib := filepath.Join(root, "app", "libusdt_lib.so")
	id, err := IDOf(hostLib)
	if err != nil {
		t.Fatal(err)
	}
	proc, objs, err := Objects(fx.PID())
	if err != nil {
		t.Fatal(err)
	}
	o := objectByPath(t, objs, hostLib)
	if o.ID() != id || o.HostPath != hostLib {
		t.Fatalf("id %v (want %v), HostPath %q (want %q)", o.ID(), id, o.HostPath, hostLib)
	}
	// Inside its root, the process's own name for the file works too.
	f, err := proc.OpenInRoot("/app/libusdt_lib.so")
	if err != nil {
		t.Fatal(err)
	}
	checkFileID(t, f, id)
}
