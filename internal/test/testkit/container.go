package testkit

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// containerScript runs in a new mount namespace: it makes $ROOT the root
// (pivot_root, as container runtimes do, so maps shows paths relative to
// it) and execs the fixture from there. The old root stays mounted at
// /old: umount is not in the container. Nothing from the host is mounted
// into $ROOT, so removing it afterwards cannot touch host files.
const containerScript = `set -e
mount --make-rprivate /
mount --bind "$ROOT" "$ROOT"
cd "$ROOT"
pivot_root . old
# $ORIGIN needs /proc/self/exe, and the container has no /proc.
LD_LIBRARY_PATH=/app exec /app/usdt_lib_user
`

// StartContainer runs usdt_lib_user as a container would: in its own
// mount namespace, with a root directory holding only the fixture at
// /app/usdt_lib_user, its library at /app/libusdt_lib.so and the C
// runtime. It returns the process and the root's path on the host.
func StartContainer(t *testing.T) (fx *Process, root string) {
	t.Helper()
	RequireKernel(t)
	for _, tool := range []string{"unshare", "pivot_root", "mount"} {
		if _, err := exec.LookPath(tool); err != nil {
			Unavailable(t, "container test needs %s (util-linux): %v", tool, err)
		}
	}
	root = ContainerRoot(t)
	t.Setenv("ROOT", root)
	fx = Start(t, "unshare", "--mount", "--propagation", "private", "sh", "-c", containerScript)
	return fx, root
}

// ContainerRoot makes a directory that can serve as usdt_lib_user's root.
func ContainerRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for dst, src := range map[string]string{
		"app/usdt_lib_user":              Fixture("usdt_lib_user"),
		"app/libusdt_lib.so":             Fixture("libusdt_lib.so"),
		"lib/x86_64-linux-gnu/libc.so.6": "/lib/x86_64-linux-gnu/libc.so.6",
		"lib64/ld-linux-x86-64.so.2":     "/lib64/ld-linux-x86-64.so.2",
		"old/.keep":                      "",
	} {
		CopyFile(t, src, filepath.Join(root, dst))
	}
	return root
}

// CopyFile copies src to dst (mode 0755), creating dst's directories; an
// empty src only creates the directories.
func CopyFile(t *testing.T, src, dst string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if src == "" {
		return
	}
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
}
