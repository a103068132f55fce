package procmaps

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/probekit/probekit/internal/test/testkit"
)

// permPIDEnv carries the target PID to the test binary re-run as nobody.
const permIDEnv = "PROBEKIT_PERM_FILE_ID"

const permPIDEnv = "PROBEKIT_PROCMAPS_PERM_PID"

// TestPermissionDenied: an unprivileged user reading a root process gets
// an error that wraps os.ErrPermission and says what to do, and
// FindPIDs counts the processes it could not read.
func TestPermissionDenied(t *testing.T) {
	testkit.RequireKernel(t)
	fx := testkit.Start(t, fixturePath(t, "usdt_sample"))
	// The test binary sits in a 0700 build directory; nobody needs a copy
	// it can execute.
	dir := testkit.SharedTempDir(t)
	bin := filepath.Join(dir, "procmaps.test")
	testkit.CopyFile(t, os.Args[0], bin)
	cmd := exec.Command(bin, "-test.run=^TestPermissionHelper$", "-test.v")
	// The fixture's identity travels to the helper: nobody may not reach
	// the checkout's directories to stat it.
	id, err := IDOf(fixturePath(t, "usdt_sample"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Env = append(os.Environ(), permPIDEnv+"="+strconv.Itoa(fx.PID()),
		permIDEnv+"="+strconv.FormatUint(id.Dev, 10)+":"+strconv.FormatUint(id.Inode, 10))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestPermissionHelper") {
		t.Fatalf("as nobody: %v\n%s", err, out)
	}
}

func TestPermissionHelper(t *testing.T) {
	pid, err := strconv.Atoi(os.Getenv(permPIDEnv))
	if err != nil {
		t.Skip("run by TestPermissionDenied")
	}
	p, err := Open(pid) // /proc/PID/stat is world-readable
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Objects()
	if !errors.Is(err, os.ErrPermission) || !strings.Contains(err.Error(), "root") {
		t.Fatalf("Objects as uid %d: %v, want os.ErrPermission with a hint", os.Getuid(), err)
	}
	t.Log(err)
	_, err = p.OpenInRoot("/etc/hostname")
	if !errors.Is(err, os.ErrPermission) {
		t.Fatalf("OpenInRoot as uid %d: %v", os.Getuid(), err)
	}
	// The root fixture maps its executable, but nobody cannot see that:
	// it is not found, and it is counted.
	var id FileID
	if _, err := fmt.Sscanf(os.Getenv(permIDEnv), "%d:%d", &id.Dev, &id.Inode); err != nil {
		t.Fatalf("%s: %v", permIDEnv, err)
	}
	procs, unreadable, err := FindProcesses(id)
	if err != nil || slices.ContainsFunc(procs, func(p Process) bool { return p.PID == pid }) || unreadable == 0 {
		t.Fatalf("FindProcesses as uid %d = %v, %d unreadable, %v; want pid %d left out and counted", os.Getuid(), procs, unreadable, err, pid)
	}
	t.Logf("%d processes unreadable", unreadable)
}
