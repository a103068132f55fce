package procmaps

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/probekit/probekit/internal/test/testkit"
)

func fixturePath(t testing.TB, name string) string {
	t.Helper()
	p, err := filepath.EvalSymlinks(testkit.Fixture(name))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func objectByPath(t testing.TB, objs []Object, path string) *Object {
	t.Helper()
	for i := range objs {
		if objs[i].Path == path {
			return &objs[i]
		}
	}
	var paths []string
	for _, o := range objs {
		paths = append(paths, o.Path)
	}
	t.Fatalf("no object %s among %q", path, paths)
	return nil
}

func TestObjectsOfLibraryUser(t *testing.T) {
	testkit.RequireKernel(t)
	exe, lib := fixturePath(t, "usdt_lib_user"), fixturePath(t, "libusdt_lib.so")
	fx := testkit.Start(t, exe)
	proc, objs, err := Objects(fx.PID())
	if err != nil {
		t.Fatal(err)
	}
	if proc.PID != fx.PID() || proc.StartTime == 0 {
		t.Fatalf("identity %v", proc)
	}
	for _, o := range objs {
		if !strings.HasPrefix(o.Path, "/") || o.Inode == 0 || len(o.Mappings) == 0 {
			t.Errorf("not a file object: %+v", o)
		}
	}
	for _, path := range []string{exe, lib} {
		o := objectByPath(t, objs, path)
		id, err := IDOf(path)
		if err != nil {
			t.Fatal(err)
		}
		if o.ID() != id || o.Deleted || o.HostPath != path {
			t.Errorf("%s: id %v (want %v), deleted %v, host path %q", path, o.ID(), id, o.Deleted, o.HostPath)
		}
		checkSegments(t, o, path)
	}

	// The library's code, read at the runtime address computed from its
	// file offset, is the code in the file.
	o := objectByPath(t, objs, lib)
	_, off := symbolOffset(t, lib, "usdt_lib_fire_shared")
	addr, err := o.Address(off, Exec)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := readMem(t, fx.PID(), addr, 32), readFileAt(t, lib, off, 32); !bytes.Equal(got, want) {
		t.Fatalf("memory at %#x is % x, file at %#x is % x", addr, got, off, want)
	}
	if back, err := o.FileOffset(addr); err != nil || back != off {
		t.Fatalf("FileOffset(%#x) = %#x, %v; want %#x", addr, back, err, off)
	}

	// Object by identity finds the same thing.
	byID, err := proc.Object(o.ID())
	if err != nil || len(byID.Mappings) != len(o.Mappings) || byID.Mappings[0] != o.Mappings[0] {
		t.Fatalf("Object(%v) = %+v, %v", o.ID(), byID, err)
	}
	f, err := proc.OpenObject(o)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
}

// checkSegments checks that every PT_LOAD of the file is mapped at its
// page-aligned offset with its execute permission.
func checkSegments(t *testing.T, o *Object, path string) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD || p.Filesz == 0 {
			continue
		}
		found := false
		for _, m := range o.Mappings {
			if m.Offset == p.Off&^(pageAlign-1) && (m.Perms&Exec != 0) == (p.Flags&elf.PF_X != 0) {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: PT_LOAD at offset %#x (%v) not mapped: %+v", path, p.Off, p.Flags, o.Mappings)
		}
	}
}

// TestSemaphoreAddress: the runtime address computed for the fixture's
// semaphore is the counter the program tests.
func TestSemaphoreAddress(t *testing.T) {
	testkit.RequireKernel(t)
	exe := fixturePath(t, "usdt_sample")
	fx := testkit.Start(t, exe)
	proc, err := Open(fx.PID())
	if err != nil {
		t.Fatal(err)
	}
	_, off := symbolOffset(t, exe, "sample_sema_semaphore")
	id, err := IDOf(exe)
	if err != nil {
		t.Fatal(err)
	}
	addr, err := proc.Address(id, off, Write)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := testkit.ReadUint16(fx.PID(), addr); err != nil || v != 0 {
		t.Fatalf("counter before: %d, %v", v, err)
	}
	if hits := fx.Fire("sema", 1); len(hits) != 1 || !hits[0].Skipped {
		t.Fatalf("with counter 0: %+v", hits)
	}
	writeMem(t, fx.PID(), addr, binary.NativeEndian.AppendUint16(nil, 1))
	if hits := fx.Fire("sema", 1); len(hits) != 1 || hits[0].Skipped {
		t.Fatalf("with counter 1: %+v", hits)
	}
	writeMem(t, fx.PID(), addr, binary.NativeEndian.AppendUint16(nil, 0))
	if hits := fx.Fire("sema", 1); len(hits) != 1 || !hits[0].Skipped {
		t.Fatalf("with counter back at 0: %+v", hits)
	}
}

// TestPython: /usr/bin/python3.11 is ET_EXEC, so the runtime address of
// its semaphore is its link-time address.
func TestPython(t *testing.T) {
	testkit.RequireKernel(t)
	const python = "/usr/bin/python3.11"
	if _, err := os.Stat(python); err != nil {
		testkit.Unavailable(t, "%s: %v", python, err)
	}
	vaddr, off := stapsdtSemaphore(t, python, "python", "function__entry")
	cmd := exec.Command(python, "-c", "import sys; sys.stdin.read()")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { in.Close(); cmd.Wait() }()
	proc, objs, err := Objects(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	o := objectByPath(t, objs, python)
	addr, err := o.Address(off, Write)
	if err != nil || addr != vaddr {
		t.Fatalf("Address(%#x) = %#x, %v; want %#x", off, addr, err, vaddr)
	}
	if v, err := testkit.ReadUint16(proc.PID, addr); err != nil || v != 0 {
		t.Fatalf("python's semaphore: %d, %v", v, err)
	}
}

func TestOpenMissingProcess(t *testing.T) {
	pid := unusedPID(t)
	_, err := Open(pid)
	if !errors.Is(err, ErrProcessGone) || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Open(%d): %v, want ErrProcessGone and os.ErrNotExist", pid, err)
	}
	if _, err := Open(0); err == nil {
		t.Fatal("Open(0) succeeded")
	}
	p := &Process{PID: pid, StartTime: 1}
	if _, _, err := p.Mappings(); !errors.Is(err, ErrProcessGone) {
		t.Fatalf("Mappings of a missing process: %v", err)
	}
}

func unusedPID(t *testing.T) int {
	for pid := 4194000; pid > 1000; pid -= 997 {
		if err := syscall.Kill(pid, 0); err == syscall.ESRCH {
			return pid
		}
	}
	t.Fatal("no unused pid")
	return 0
}

// TestExitMidRead: the target dies between reading its maps and the
// identity check that validates them.
func TestExitMidRead(t *testing.T) {
	testkit.RequireKernel(t)
	fx := testkit.Start(t, fixturePath(t, "usdt_sample"))
	proc, err := Open(fx.PID())
	if err != nil {
		t.Fatal(err)
	}
	testHookAfterRead = func(int) { fx.Kill() }
	defer func() { testHookAfterRead = nil }()
	objs, err := proc.Objects()
	if !errors.Is(err, ErrProcessGone) || !errors.Is(err, os.ErrNotExist) || objs != nil {
		t.Fatalf("Objects of a process that exited mid-read: %d objects, %v", len(objs), err)
	}
	testHookAfterRead = nil
	if err := proc.Check(); !errors.Is(err, ErrProcessGone) {
		t.Fatalf("Check: %v", err)
	}
	if _, err := proc.OpenInRoot("/"); !errors.Is(err, ErrProcessGone) {
		t.Fatalf("OpenInRoot: %v", err)
	}
}

// TestZombie: a process that was killed but not reaped still has a
// /proc entry, but no memory: it counts as gone.
func TestZombie(t *testing.T) {
	testkit.RequireKernel(t)
	cmd := exec.Command("sleep", "1000")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	proc, err := Open(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Process.Kill()
	defer cmd.Wait()
	waitState(t, cmd.Process.Pid, "Z")
	if _, err := Open(cmd.Process.Pid); !errors.Is(err, ErrProcessGone) {
		t.Fatalf("Open of a zombie: %v", err)
	}
	if _, err := proc.Objects(); !errors.Is(err, ErrProcessGone) {
		t.Fatalf("Objects of a zombie: %v", err)
	}
}

// waitState waits up to 5 seconds for pid to be in state.
func waitState(t *testing.T, pid int, state string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			t.Fatal(err)
		}
		if i := bytes.LastIndexByte(data, ')'); i > 0 && len(data) > i+2 && string(data[i+2]) == state {
			return
		}
	}
	t.Fatalf("pid %d did not reach state %s within 5s", pid, state)
}

// TestPIDReuse forces the kernel to give a dead process's PID to a new
// one (through /proc/sys/kernel/ns_last_pid) and checks that the old
// identity is not taken for the new process.
func TestPIDReuse(t *testing.T) {
	testkit.RequireKernel(t)
	old := exec.Command("sleep", "1000")
	if err := old.Start(); err != nil {
		t.Fatal(err)
	}
	pid := old.Process.Pid
	proc, err := Open(pid)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(30 * time.Millisecond) // a later start time, in clock ticks
	old.Process.Kill()
	old.Wait()

	reused := reusePID(t, pid)
	defer func() { reused.Process.Kill(); reused.Wait() }()

	for name, err := range map[string]error{
		"Check":      proc.Check(),
		"Objects":    second(proc.Objects()),
		"Mappings":   third(proc.Mappings()),
		"OpenInRoot": second(proc.OpenInRoot("/")),
	} {
		if !errors.Is(err, ErrProcessChanged) || errors.Is(err, ErrProcessGone) {
			t.Errorf("%s after PID reuse: %v, want ErrProcessChanged", name, err)
		}
	}
	now, err := Open(pid)
	if err != nil || now.StartTime == proc.StartTime {
		t.Fatalf("reopened: %v, %v (old start %d)", now, err, proc.StartTime)
	}
}

// reusePID starts `sleep` with PID pid, retrying when another process
// takes the PID first (the machine is shared).
func reusePID(t *testing.T, pid int) *exec.Cmd {
	t.Helper()
	const attempts = 200
	for range attempts {
		if err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(pid-1)), 0); err != nil {
			testkit.Unavailable(t, "cannot set ns_last_pid: %v", err)
		}
		cmd := exec.Command("sleep", "1000")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if cmd.Process.Pid == pid {
			return cmd
		}
		cmd.Process.Kill()
		cmd.Wait()
	}
	testkit.Unavailable(t, "PID %d was not reused in %d attempts (busy machine)", pid, attempts)
	return nil
}

func second[T any](_ T, err error) error        { return err }
func third[T, U any](_ T, _ U, err error) error { return err }

// Check of a live process allocates nothing (symbolize runs it after
// every SymbolizeInto), and readStart reads what procfs's parser reads.
func TestCheckNoAlloc(t *testing.T) {
	p, err := Open(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() {
		if err := p.Check(); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("Check: %v allocations", n)
	}
	st, err := readStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	start, zombie, err := readStart(os.Getpid())
	if err != nil || start != st.Starttime || zombie {
		t.Errorf("readStart: %d, %v, %v; procfs: %d", start, zombie, err, st.Starttime)
	}
}

func TestParseStatStart(t *testing.T) {
	for _, c := range []struct {
		in    string
		start uint64
		state byte
		ok    bool
	}{
		{"1 (a b) c) S 0 1 1 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 1 0 4242 100 200", 4242, 'S', true},
		{"7 (x) Z 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 99\n", 99, 'Z', true},
		{"7 (x) S 1 2", 0, 0, false},
		{"7 x S", 0, 0, false},
		{"", 0, 0, false},
		{"7 (x) S 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 99999999999999999999999", 0, 0, false},
	} {
		start, state, ok := parseStatStart([]byte(c.in))
		if start != c.start || state != c.state || ok != c.ok {
			t.Errorf("%q: %d %q %v, want %d %q %v", c.in, start, state, ok, c.start, c.state, c.ok)
		}
	}
}
