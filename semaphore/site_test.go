package semaphore

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/procmaps"
	"golang.org/x/sys/unix"
)

// mapFile maps the page of a new file holding v at offset 0x10, shared
// and writable, at addr (0: anywhere), and returns the mapping.
func mapFile(path string, addr unsafe.Pointer, v uint16) ([]byte, error) {
	b := make([]byte, os.Getpagesize())
	binary.NativeEndian.PutUint16(b[0x10:], v)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	flags := unix.MAP_SHARED
	if addr != nil {
		flags |= unix.MAP_FIXED
	}
	p, err := unix.MmapPtr(int(f.Fd()), 0, addr, uintptr(len(b)), unix.PROT_READ|unix.PROT_WRITE, flags)
	if err != nil {
		return nil, err
	}
	if addr != nil && p != addr {
		return nil, fmt.Errorf("mapped at %p, not %p", p, addr)
	}
	return unsafe.Slice((*byte)(p), len(b)), nil
}

// munmap unmaps what mapFile mapped (unix.Munmap knows only unix.Mmap's).
func munmap(b []byte) error {
	return unix.MunmapPtr(unsafe.Pointer(&b[0]), uintptr(len(b)))
}

// TestReleaseAfterUnload: an object (here a file mapping of this
// process) unloaded after Activate, and other memory mapped at its
// address with the counter's bytes at 5: Release writes nothing there,
// and is not an error. On the old code the 5 became 4.
func TestReleaseAfterUnload(t *testing.T) {
	testkit.RequireKernel(t)
	dir := t.TempDir()
	m, err := mapFile(filepath.Join(dir, "a"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	base := unsafe.Pointer(&m[0])
	addr := uint64(uintptr(base)) + 0x10
	proc, err := procmaps.Open(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	a, err := Activate(proc, addr)
	if err != nil {
		munmap(m)
		t.Fatal(err)
	}
	if v := binary.NativeEndian.Uint16(m[0x10:]); v != 1 {
		t.Errorf("counter %d after Activate, want 1", v)
	}
	if err := munmap(m); err != nil { // dlclose
		t.Fatal(err)
	}
	m2, err := mapFile(filepath.Join(dir, "b"), base, 5) // the address reused
	if err != nil {
		a.Release()
		t.Fatal(err)
	}
	defer munmap(m2)
	if err := a.Release(); err != nil {
		t.Errorf("release after unload: %v", err)
	}
	if v := binary.NativeEndian.Uint16(m2[0x10:]); v != 5 {
		t.Fatalf("the memory reused at the semaphore's address reads %d after Release, want 5 (written)", v)
	}
	if _, err := RestoreSite(proc, addr, a.site); !errors.Is(err, ErrSiteChanged) {
		t.Errorf("RestoreSite on reused memory: %v, want ErrSiteChanged", err)
	}
}

// execChildEnv makes the test binary the child of TestReleaseAfterExec
// (see TestMain): stage 1 maps FILE, says the address, waits for a line,
// execs itself as stage 2, which maps FILE again at that address (the
// same file, the same offset) with the counter at 5, says so and waits.
const execChildEnv = "PROBEKIT_SEMAPHORE_EXEC_CHILD"

func execChild() {
	stage, file, _ := strings.Cut(os.Getenv(execChildEnv), ":")
	in := bufio.NewReader(os.Stdin)
	switch stage {
	case "1":
		m, err := mapFile(file, nil, 0)
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Printf("ready %d\n", uintptr(unsafe.Pointer(&m[0])))
		in.ReadString('\n')
		os.Unsetenv(execChildEnv)
		env := append(os.Environ(), execChildEnv+"=2:"+file+":"+strconv.FormatUint(uint64(uintptr(unsafe.Pointer(&m[0]))), 10))
		exe, _ := os.Executable()
		err = syscall.Exec(exe, []string{exe}, env)
		fmt.Println("error", err)
		os.Exit(1)
	case "2":
		file, a, _ := strings.Cut(file, ":")
		base, _ := strconv.ParseUint(a, 10, 64)
		// An address of the image before exec: not a Go pointer.
		at := uintptr(base)
		if _, err := mapFile(file, *(*unsafe.Pointer)(unsafe.Pointer(&at)), 5); err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println("exec'd")
		in.ReadString('\n')
		os.Exit(0)
	}
	os.Exit(2)
}

// TestReleaseAfterExec: the process exec'd after Activate and maps the
// same file at the same address, its counter at 5: the memory is the
// new image's, and Release writes nothing there.
func TestReleaseAfterExec(t *testing.T) {
	testkit.RequireKernel(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "sema")
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), execChildEnv+"=1:"+file)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait() }()
	lines := make(chan string, 2)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	next := func() string {
		select {
		case l := <-lines:
			return l
		case <-time.After(10 * time.Second):
			return "timeout"
		}
	}
	l := next()
	base, err := strconv.ParseUint(strings.TrimPrefix(l, "ready "), 10, 64)
	if err != nil {
		t.Fatalf("child: %q", l)
	}
	addr := base + 0x10
	proc, err := procmaps.Open(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	a, err := Activate(proc, addr)
	if err != nil {
		t.Fatal(err)
	}
	if v := counter(t, proc.PID, addr); v != 1 {
		t.Errorf("counter %d after Activate, want 1", v)
	}
	stdin.Write([]byte("exec\n"))
	if l := next(); l != "exec'd" {
		a.Release()
		t.Fatalf("child: %q", l)
	}
	if err := a.Release(); err != nil {
		t.Errorf("release after exec: %v", err)
	}
	if v := counter(t, proc.PID, addr); v != 5 {
		t.Fatalf("the new image's counter reads %d after Release, want 5 (written)", v)
	}
}

// TestParseImageID: fields 48 and 51 after a name holding ") " and
// spaces; short or malformed lines are refused.
func TestParseImageID(t *testing.T) {
	var f []string
	for i := 3; i <= 52; i++ {
		f = append(f, strconv.Itoa(i*10))
	}
	line := "12 (a) b ) c) " + strings.Join(f, " ") + "\n"
	if a, e, ok := parseImageID([]byte(line)); !ok || a != 480 || e != 510 {
		t.Errorf("parseImageID: %d %d %v, want 480 510", a, e, ok)
	}
	for _, bad := range []string{"", "12 (a", "12 (a) " + strings.Join(f[:40], " "), "12 (a) " + strings.Replace(strings.Join(f, " "), "480", "x", 1)} {
		if _, _, ok := parseImageID([]byte(bad)); ok {
			t.Errorf("parseImageID(%q) ok", bad)
		}
	}
}

// FuzzParseImageID: no panic on any stat line.
func FuzzParseImageID(f *testing.F) {
	if b, err := os.ReadFile("/proc/self/stat"); err == nil {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) { parseImageID(b) })
}
