package procmaps

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/probekit/probekit/internal/test/testkit"
)

const (
	nobodyUID = testkit.NobodyUID
	otherUID  = 12345 // owns no process here
)

// secretLine is what a root-only file holds in these tests; no byte of it
// may come out of OpenOwned.
const secretLine = "0 7fffffffffff ROOT_ONLY_SECRET_hunter2\n"

// startAs starts argv as uid/gid nobody and waits for its first line on
// stdout ("ready"); it is killed and reaped when the test ends.
func startAs(t *testing.T, argv ...string) *Process {
	t.Helper()
	cmd, line := testkit.StartAs(t, nobodyUID, 10*time.Second, argv...)
	if strings.TrimSpace(line) != "ready" {
		t.Fatalf("%q: %q", argv, line)
	}
	p, err := Open(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// writeFile writes data to path with mode and owner uid.
func writeFile(t *testing.T, path, data string, mode os.FileMode, uid int) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(path, uid, uid); err != nil {
		t.Fatal(err)
	}
}

// expectRefused checks that OpenOwned refuses path for p with an error
// wrapping want and gives no file.
func expectRefused(t *testing.T, p *Process, path string, want error) {
	t.Helper()
	f, err := p.OpenOwned(path)
	if err == nil {
		b, _ := io.ReadAll(f)
		f.Close()
		t.Fatalf("OpenOwned(%s) for uid %d opened it and read %q", path, nobodyUID, b)
	}
	if !errors.Is(err, want) || strings.Contains(err.Error(), "SECRET") {
		t.Fatalf("OpenOwned(%s): %v, want %v", path, err, want)
	}
	t.Logf("%s: %v", filepath.Base(path), err)
}

func expectRead(t *testing.T, p *Process, path, want string) {
	t.Helper()
	f, err := p.OpenOwned(path)
	if err != nil {
		t.Fatalf("OpenOwned(%s): %v", path, err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil || string(b) != want {
		t.Fatalf("OpenOwned(%s) read %q, %v; want %q", path, b, err, want)
	}
}

// TestOpenOwned: for a process of uid nobody, OpenOwned reads its own
// file and a root file of one link, and refuses a symlink to a root-only
// file, a hard link to it (made by nobody with fs.protected_hardlinks=0),
// another user's file, a file writable by others and a FIFO.
func TestOpenOwned(t *testing.T) {
	testkit.RequireKernel(t) // root: chown, the sysctl, a process as nobody
	dir, err := os.MkdirTemp("", "probekit-owned-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// World-writable and sticky, as /tmp is: nobody makes its links here.
	if err := os.Chmod(dir, 0o1777); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(dir, "secret")
	writeFile(t, secret, secretLine, 0o600, 0)
	writeFile(t, filepath.Join(dir, "own"), "own\n", 0o644, nobodyUID)
	writeFile(t, filepath.Join(dir, "rootfile"), "root\n", 0o644, 0)
	writeFile(t, filepath.Join(dir, "other"), secretLine, 0o644, otherUID)
	writeFile(t, filepath.Join(dir, "writable"), "w\n", 0o666, nobodyUID)
	if err := unix.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(dir, "symlink")); err != nil {
		t.Fatal(err)
	}
	os.Lchown(filepath.Join(dir, "symlink"), nobodyUID, nobodyUID)
	hardlinkAsNobody(t, secret, filepath.Join(dir, "hardlink"))

	p := startAs(t, "sh", "-c", "echo ready; exec sleep 60")
	expectRead(t, p, filepath.Join(dir, "own"), "own\n")
	expectRead(t, p, filepath.Join(dir, "rootfile"), "root\n")
	for _, name := range []string{"symlink", "hardlink", "other", "writable"} {
		t.Run(name, func(t *testing.T) { expectRefused(t, p, filepath.Join(dir, name), ErrNotOwned) })
	}
	t.Run("fifo", func(t *testing.T) { expectRefused(t, p, filepath.Join(dir, "fifo"), ErrNotRegular) })
}

// hardlinkAsNobody links secret at link as uid nobody, with
// fs.protected_hardlinks set to 0 for the time of the link (with 1, the
// default, the kernel refuses it: may_linkat).
func hardlinkAsNobody(t *testing.T, secret, link string) {
	t.Helper()
	const sysctl = "/proc/sys/fs/protected_hardlinks"
	old, err := os.ReadFile(sysctl)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sysctl, []byte("0"), 0); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ln", secret, link)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobodyUID, Gid: nobodyUID}}
	out, err := cmd.CombinedOutput()
	if rerr := os.WriteFile(sysctl, old, 0); rerr != nil {
		t.Errorf("restore %s: %v", sysctl, rerr)
	}
	if err != nil {
		t.Fatalf("ln as nobody: %v: %s", err, out)
	}
	var st unix.Stat_t
	if err := unix.Stat(link, &st); err != nil || st.Uid != 0 || st.Nlink != 2 {
		t.Fatalf("the hard link: %v, uid %d, %d links", err, st.Uid, st.Nlink)
	}
}

// TestOpenOwnedUserNamespace: a process of uid nobody in a user and mount
// namespace of its own (unshare -Urm) with a private tmpfs on /tmp, where
// it may symlink or bind-mount any file it can look up, a root-only one
// included: both are refused; its own file there is read.
func TestOpenOwnedUserNamespace(t *testing.T) {
	testkit.RequireKernel(t)
	// Outside /tmp, which the namespace covers; /dev/shm is searchable by
	// everyone.
	f, err := os.CreateTemp("/dev/shm", "probekit-secret-")
	if err != nil {
		testkit.Unavailable(t, "no /dev/shm: %v", err)
	}
	secret := f.Name()
	f.Close()
	t.Cleanup(func() { os.Remove(secret) })
	writeFile(t, secret, secretLine, 0o600, 0)
	p := startAs(t, "unshare", "-Urm", "sh", "-c",
		`mount -t tmpfs none /tmp && echo own > /tmp/own && ln -s "$0" /tmp/symlink &&
		touch /tmp/bound && mount --bind "$0" /tmp/bound && echo ready && exec sleep 60`, secret)
	if _, err := os.Stat("/tmp/bound"); err == nil {
		t.Fatal("the namespace's /tmp is the host's")
	}
	expectRead(t, p, "/tmp/own", "own\n")
	t.Run("symlink", func(t *testing.T) { expectRefused(t, p, "/tmp/symlink", ErrNotOwned) })
	t.Run("bind-mount", func(t *testing.T) { expectRefused(t, p, "/tmp/bound", ErrNotOwned) })
}
