package procmaps

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/probekit/probekit/internal/test/testkit"
)

// TestDeletedObject: a binary unlinked after it started is still listed,
// opened through /proc/PID/map_files and translated.
func TestDeletedObject(t *testing.T) {
	testkit.RequireKernel(t)
	exe := filepath.Join(t.TempDir(), "usdt sample copy") // a space, for good measure
	testkit.CopyFile(t, fixturePath(t, "usdt_sample"), exe)
	id, err := IDOf(exe)
	if err != nil {
		t.Fatal(err)
	}
	_, off := symbolOffset(t, exe, "sample_sema_fire")
	code := readFileAt(t, exe, off, 32)
	fx := testkit.Start(t, exe)
	if err := os.Remove(exe); err != nil {
		t.Fatal(err)
	}
	proc, objs, err := Objects(fx.PID())
	if err != nil {
		t.Fatal(err)
	}
	o := objectByPath(t, objs, exe)
	if !o.Deleted || o.ID() != id {
		t.Fatalf("deleted %v, id %v (want %v)", o.Deleted, o.ID(), id)
	}
	if !strings.HasPrefix(o.HostPath, fmt.Sprintf("/proc/%d/map_files/", fx.PID())) {
		t.Fatalf("HostPath %q, want a map_files path", o.HostPath)
	}
	f, err := proc.OpenObject(o)
	if err != nil {
		t.Fatal(err)
	}
	checkFileID(t, f, id)
	addr, err := o.Address(off, Exec)
	if err != nil {
		t.Fatal(err)
	}
	if got := readMem(t, fx.PID(), addr, 32); !bytes.Equal(got, code) {
		t.Fatalf("memory at %#x: % x, want % x", addr, got, code)
	}
	procs, _, err := FindProcesses(id)
	if err != nil || !slices.Contains(procs, *proc) {
		t.Fatalf("FindProcesses(%v) = %v, %v; want %v among them", id, procs, err, proc)
	}
}

// TestFindPIDs: processes are found by the file's identity, only those
// that map it.
func TestFindPIDs(t *testing.T) {
	testkit.RequireKernel(t)
	users := []*testkit.Process{
		testkit.Start(t, fixturePath(t, "usdt_lib_user")),
		testkit.Start(t, fixturePath(t, "usdt_lib_user")),
	}
	other := testkit.Start(t, fixturePath(t, "usdt_sample"))
	// A hard link is the same file under another name.
	link := filepath.Join(t.TempDir(), "lib.so")
	if err := os.Link(fixturePath(t, "libusdt_lib.so"), link); err != nil {
		t.Skipf("hard link: %v", err)
	}
	pids, _, err := FindPIDs(link)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range users {
		if !slices.Contains(pids, u.PID()) {
			t.Errorf("pid %d maps the library but is not in %v", u.PID(), pids)
		}
	}
	if slices.Contains(pids, other.PID()) {
		t.Errorf("pid %d does not map the library but is in %v", other.PID(), pids)
	}
	if !slices.IsSorted(pids) {
		t.Errorf("not sorted: %v", pids)
	}
	// A copy is another file.
	cp := filepath.Join(t.TempDir(), "copy.so")
	testkit.CopyFile(t, fixturePath(t, "libusdt_lib.so"), cp)
	if pids, _, err := FindPIDs(cp); err != nil || len(pids) != 0 {
		t.Errorf("FindPIDs(copy) = %v, %v; want none", pids, err)
	}
	if _, _, err := FindPIDs(filepath.Join(t.TempDir(), "missing")); !os.IsNotExist(err) {
		t.Errorf("FindPIDs(missing): %v", err)
	}
}
