package symbolize

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/procmaps"
	"golang.org/x/sys/unix"
)

func TestParsePerfMap(t *testing.T) {
	in := "" +
		"1000 10 first\n" +
		"0x2000 0x20 with spaces in [eval]:1:25\n" +
		"garbage\n" +
		"3000 0 zero size\n" +
		"ffffffffffffff00 200 wraps\n" +
		"4000 10\n" +
		"zz 10 nothex\n" +
		"1008 4 later overlap\r\n" +
		"\n" +
		"5000 100 outer\n" +
		"5010 10 inner\n"
	m, err := ParsePerfMap(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if m.Bad != 5 || m.Len() != 5 || m.Truncated {
		t.Fatalf("bad %d, len %d, truncated %v", m.Bad, m.Len(), m.Truncated)
	}
	for _, c := range []struct {
		addr uint64
		name string
		off  uint64
	}{
		{0x1000, "first", 0}, {0x1007, "first", 7}, {0x1008, "later overlap", 0}, {0x100b, "later overlap", 3},
		{0x100c, "first", 0xc}, {0x1010, "", 0}, {0x201f, "with spaces in [eval]:1:25", 0x1f},
		{0x2020, "", 0}, {0x5000, "outer", 0}, {0x5010, "inner", 0}, {0x5020, "outer", 0x20}, {0xfff, "", 0},
	} {
		name, off, ok := m.Lookup(c.addr)
		if name != c.name || off != c.off || ok != (c.name != "") {
			t.Errorf("%#x: %q+%#x %v, want %q+%#x", c.addr, name, off, ok, c.name, c.off)
		}
	}
}

// TestParsePerfMapCeilings: a name is cut at MaxPerfMapName; a file
// beyond MaxPerfMapBytes is read up to it.
func TestParsePerfMapCeilings(t *testing.T) {
	long := "1000 10 " + strings.Repeat("n", MaxPerfMapName+100) + "\n"
	m, err := ParsePerfMap(strings.NewReader(long))
	if err != nil {
		t.Fatal(err)
	}
	if name, _, _ := m.Lookup(0x1000); len(name) != MaxPerfMapName {
		t.Fatalf("name of %d bytes", len(name))
	}
	line := []byte("1000 10 x\n")
	big := bytes.Repeat(line, 1000)
	m, err = parsePerfMap(bytes.NewReader(big), nil, false, 100*len(line)+5, 1000)
	if err != nil || !m.Truncated || m.Len() != 100 || m.Bad != 0 {
		t.Fatalf("bytes ceiling: truncated %v, len %d, bad %d, %v", m.Truncated, m.Len(), m.Bad, err)
	}
	m, err = parsePerfMap(bytes.NewReader(big), nil, false, len(big), 10)
	if err != nil || !m.Truncated || m.Len() != 10 {
		t.Fatalf("entries ceiling: truncated %v, len %d, %v", m.Truncated, m.Len(), err)
	}
}

// TestParsePerfMapAppended: a perf map read again continues where the
// last read stopped (a line being written is left for the next), the
// earlier map is unchanged, and later lines win over earlier ones.
func TestParsePerfMapAppended(t *testing.T) {
	first := "1000 10 old\nbad\n2000 10 par"
	m1, err := parsePerfMap(strings.NewReader(first), nil, true, MaxPerfMapBytes, MaxPerfMapEntries)
	if err != nil || m1.Len() != 1 || m1.Bad != 1 || m1.size != int64(len("1000 10 old\nbad\n")) {
		t.Fatalf("first: %d entries, %d bad, size %d, %v", m1.Len(), m1.Bad, m1.size, err)
	}
	rest := "2000 10 partial done\n1000 8 new\n"
	m2, err := parsePerfMap(strings.NewReader(rest), m1, true, MaxPerfMapBytes, MaxPerfMapEntries)
	if err != nil || m2.Len() != 3 || m2.Bad != 1 {
		t.Fatalf("second: %d entries, %d bad, %v", m2.Len(), m2.Bad, err)
	}
	for _, c := range []struct {
		m    *PerfMap
		addr uint64
		want string
	}{{m1, 0x1000, "old"}, {m1, 0x2000, ""}, {m2, 0x1000, "new"}, {m2, 0x1009, "old"}, {m2, 0x2000, "partial done"}} {
		if name, _, _ := c.m.Lookup(c.addr); name != c.want {
			t.Errorf("%#x: %q, want %q", c.addr, name, c.want)
		}
	}
}

func FuzzPerfMap(f *testing.F) {
	f.Add([]byte("e32c7114d9e 26 JS:~probekitHotLoop [eval]:1:25\n7f28937c5900 12c JS:^probekitHotLoop [eval]:1:25\n"))
	f.Add([]byte("0x7f0000001000 0x40 Lcom/example/Foo;bar\n7f0000001000 10 later\n"))
	f.Add([]byte("1000 10 a\n1008 ffffffffffffffff b\n\r\n  \t 5 5 c d\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParsePerfMap(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		if m.Len()+m.Bad > bytes.Count(data, []byte("\n"))+1 {
			t.Fatalf("%d entries and %d bad lines from %d lines", m.Len(), m.Bad, bytes.Count(data, []byte("\n"))+1)
		}
		for _, e := range m.entries {
			for _, a := range []uint64{e.start, e.end - 1, e.start - 1, e.end} {
				name, off, ok := m.Lookup(a)
				if ok && (name == "" || len(name) > MaxPerfMapName) {
					t.Fatalf("%#x: name %q", a, name)
				}
				_ = off
			}
			if name, _, ok := m.Lookup(e.start); !ok || name == "" {
				t.Fatalf("entry %+v not found at its start", e)
			}
		}
		if len(m.entries) <= 64 {
			for _, e := range m.entries {
				for _, a := range []uint64{e.start, e.end - 1, e.start - 1, e.end} {
					gn, gofs, gok := m.Lookup(a)
					wn, wofs, wok := perfOracle(m, a)
					if gn != wn || gofs != wofs || gok != wok {
						t.Fatalf("%#x: %q+%#x %v, the scan gives %q+%#x %v", a, gn, gofs, gok, wn, wofs, wok)
					}
				}
			}
		}
		// Read in two parts, as a growing file is, it gives the same map.
		k := len(data) / 2
		m1, err := parsePerfMap(bytes.NewReader(data[:k]), nil, true, MaxPerfMapBytes, MaxPerfMapEntries)
		if err != nil {
			t.Fatal(err)
		}
		m2, err := parsePerfMap(bytes.NewReader(data[m1.size:]), m1, false, MaxPerfMapBytes, MaxPerfMapEntries)
		if err != nil {
			t.Fatal(err)
		}
		if m2.Len() != m.Len() || m2.Bad != m.Bad {
			t.Fatalf("in parts: %d entries, %d bad; whole: %d, %d", m2.Len(), m2.Bad, m.Len(), m.Bad)
		}
		for _, e := range m.entries {
			n1, o1, _ := m.Lookup(e.start)
			n2, o2, _ := m2.Lookup(e.start)
			if n1 != n2 || o1 != o2 {
				t.Fatalf("%#x: whole %q+%#x, in parts %q+%#x", e.start, n1, o1, n2, o2)
			}
		}
	})
}

// startNode runs node with --perf-basic-prof and a named JavaScript
// function in a loop; it returns the process and, once node's perf map
// names the function in anonymous executable memory, that entry.
func startNode(tb testing.TB) (cmd *exec.Cmd, addr uint64, name string) {
	tb.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		testkit.Unavailable(tb, "no node: %v", err)
	}
	cmd = exec.Command(node, "--perf-basic-prof", "-e",
		`function probekitHotLoop(n){let s=0;for(let i=0;i<n;i++)s+=i*i%7;return s}
		 setInterval(()=>{probekitHotLoop(100000)},1)`)
	cmd.Dir = tb.TempDir() // node writes isolate-*-v8.log files there
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	pid := cmd.Process.Pid
	path := "/tmp/perf-" + strconv.Itoa(pid) + ".map"
	tb.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		os.Remove(path)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
		data, _ := os.ReadFile(path)
		var ms []procmaps.Mapping
		for _, line := range strings.Split(string(data), "\n") {
			f := strings.SplitN(line, " ", 3)
			if len(f) != 3 || !strings.Contains(f[2], "probekitHotLoop") {
				continue
			}
			a, err := strconv.ParseUint(f[0], 16, 64)
			if err != nil {
				continue
			}
			if ms == nil {
				pp, err := procmaps.Open(pid)
				if err != nil {
					tb.Fatal(err)
				}
				if ms, _, err = pp.Mappings(); err != nil {
					tb.Fatal(err)
				}
			}
			for _, m := range ms {
				if m.Start <= a && a < m.End && m.Perms&procmaps.Exec != 0 && !m.FileBacked() {
					addr, name = a, f[2]
				}
			}
		}
		if name != "" {
			return cmd, addr, name
		}
	}
	tb.Fatalf("node's perf map %s names no probekitHotLoop in executable anonymous memory within 20s", path)
	return nil, 0, ""
}

// TestSymbolizeNodePerfMap: an address in a JavaScript function node compiled is
// named from /tmp/perf-PID.map.
func TestSymbolizeNodePerfMap(t *testing.T) {
	cmd, addr, name := startNode(t)
	p, err := New(nil).Process(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	frames, err := p.Symbolize([]uint64{addr + 1})
	if err != nil {
		t.Fatal(err)
	}
	fr := frames[0]
	if fr.Function != name || fr.Offset != 1 || fr.Object != "/tmp/perf-"+strconv.Itoa(cmd.Process.Pid)+".map" {
		t.Fatalf("%#x: %+v, want %s+0x1", addr+1, fr, name)
	}
}

// selfJIT maps size bytes of private anonymous executable memory in the
// test process, as a JIT does, and writes /tmp/perf-PID.map with one
// entry, name, of 0x100 bytes at its start. Both go when the test ends.
func selfJIT(t *testing.T, size int, name string) (base uint64, path string) {
	t.Helper()
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_EXEC, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	base = uint64(uintptr(unsafe.Pointer(&mem[0])))
	path = "/tmp/perf-" + strconv.Itoa(os.Getpid()) + ".map"
	t.Cleanup(func() {
		unix.Munmap(mem)
		os.Remove(path)
	})
	if err := os.WriteFile(path, fmt.Appendf(nil, "%x 100 %s\n", base, name), 0o644); err != nil {
		t.Fatal(err)
	}
	return base, path
}

// TestSymbolizePerfMapGrows: JIT code (here anonymous executable memory of
// the test itself) is named from /tmp/perf-PID.map, and a function added
// to the map later is found once the file is read again.
func TestSymbolizePerfMapGrows(t *testing.T) {
	base, path := selfJIT(t, 2*4096, "jitted_one")
	p, err := New(nil).Process(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	frames, err := p.Symbolize([]uint64{base + 0x10, base + 0x1010})
	if err != nil {
		t.Fatal(err)
	}
	if frames[0].Function != "jitted_one" || frames[0].Offset != 0x10 || frames[0].Object != path {
		t.Fatalf("%+v", frames[0])
	}
	if frames[1].Function != "" || frames[1].Object != "[anon]" {
		t.Fatalf("not in the map: %+v", frames[1])
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, "%x 100 jitted_two\n", base+0x1000)
	f.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		frames, err = p.Symbolize([]uint64{base + 0x1010})
		if err != nil {
			t.Fatal(err)
		}
		if frames[0].Function == "jitted_two" || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if frames[0].Function != "jitted_two" || frames[0].Offset != 0x10 {
		t.Fatalf("after the map grew: %+v", frames[0])
	}
}

// TestSymbolizeNewMapping: memory mapped after the Process was opened is
// found: an address outside every mapping makes it read the maps again.
func TestSymbolizeNewMapping(t *testing.T) {
	p, err := New(nil).Process(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	base, _ := selfJIT(t, 4096, "late_code")
	time.Sleep(2 * mapsRecheck)
	frames, err := p.Symbolize([]uint64{base + 1})
	if err != nil {
		t.Fatal(err)
	}
	if frames[0].Function != "late_code" || frames[0].Offset != 1 {
		t.Fatalf("%+v", frames[0])
	}
}

// TestSymbolizePerfMapContainer: a JIT in its own PID and mount namespaces
// writes /tmp/perf-1.map (1: its PID there) into a /tmp only it sees; the
// map is found through its root and its namespace PID.
func TestSymbolizePerfMapContainer(t *testing.T) {
	testkit.RequireKernel(t) // root, for the namespaces and the mount
	// The system's interpreter, not a version manager's shim found first
	// on PATH, which looks around the working directory and $HOME.
	py := "/usr/bin/python3.11"
	if _, err := os.Stat(py); err != nil {
		testkit.Unavailable(t, "no python3.11 (make deps installs it): %v", err)
	}
	const script = `
import mmap, ctypes, os, time
rwx = mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC
private = mmap.mmap(-1, 4096, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, prot=rwx)
shared = mmap.mmap(-1, 4096, prot=rwx)  # maps shows /dev/zero (deleted)
a = ctypes.addressof(ctypes.c_char.from_buffer(private))
b = ctypes.addressof(ctypes.c_char.from_buffer(shared))
open("/tmp/perf-%d.map" % os.getpid(), "w").write("%x 40 jit_private\n%x 40 jit_shared\n" % (a, b))
print(os.readlink("/proc/self"), os.getpid(), "%x" % a, "%x" % b, flush=True)
time.sleep(60)
`
	cmd := exec.Command("unshare", "--pid", "--fork", "--kill-child", "--mount", "--propagation", "private",
		"sh", "-c", `mount -t tmpfs none /tmp && exec "$0" -c "$1"`, py, script)
	// The new /tmp hides whatever lies under it, a checkout in /tmp
	// included: start from /.
	cmd.Dir = "/"
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		testkit.Unavailable(t, "unshare: %v", err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		lines <- line
	}()
	var line string
	select {
	case line = <-lines:
	case <-time.After(20 * time.Second):
		t.Fatal("the JIT did not start within 20s")
	}
	var hostPID, nsPID int
	var priv, shared uint64
	if _, err := fmt.Sscanf(line, "%d %d %x %x", &hostPID, &nsPID, &priv, &shared); err != nil || nsPID != 1 {
		t.Fatalf("%q: %v", line, err)
	}
	if _, err := os.Stat("/tmp/perf-1.map"); err == nil {
		t.Fatal("the container's /tmp is the host's")
	}
	p, err := New(nil).Process(hostPID)
	if err != nil {
		t.Fatal(err)
	}
	frames, err := p.Symbolize([]uint64{priv + 4, shared + 5})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"jit_private", "jit_shared"} {
		if fr := frames[i]; fr.Function != want || fr.Offset != uint64(4+i) || fr.Object != "/tmp/perf-1.map" {
			t.Errorf("%+v, want %s", fr, want)
		}
	}
}

// jitAsNobody runs python3.11 as uid nobody after setup (a shell command
// run first, as nobody too, with $$ the PID python gets), in a user and
// mount namespace of its own with a private tmpfs on /tmp when userns is
// set. Python maps anonymous executable memory and prints its address.
func jitAsNobody(t *testing.T, userns bool, setup string) (pid int, addr uint64) {
	t.Helper()
	argv := []string{"sh", "-c", setup + ` && exec "$0" -c "$1"`, testkit.Python311(t), testkit.JITScript}
	if userns {
		argv = append([]string{"unshare", "-Urm"}, argv...)
		argv[4] = "mount -t tmpfs none /tmp && " + argv[4]
	}
	cmd, line := testkit.StartAs(t, testkit.NobodyUID, 20*time.Second, argv...)
	t.Cleanup(func() { os.Remove("/tmp/perf-" + strconv.Itoa(cmd.Process.Pid) + ".map") })
	if _, err := fmt.Sscanf(line, "%x", &addr); err != nil {
		t.Fatalf("%q: %v", line, err)
	}
	return cmd.Process.Pid, addr
}

// TestSymbolizePerfMapRefused: a process of uid nobody whose
// /tmp/perf-PID.map is a symlink, a hard link or a bind mount of a
// root-only file, or a file of another user, gets no name from it: no byte
// of the file comes out, and PerfMapErr says why. Its own perf map is
// read (the control).
func TestSymbolizePerfMapRefused(t *testing.T) {
	testkit.RequireKernel(t) // root: a process as nobody, chown, the sysctl
	const secret = "ROOT_ONLY_SECRET_hunter2"
	dir, err := os.MkdirTemp("", "probekit-perfmap-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// On /tmp's file system for the hard link; covering every address.
	rootOnly := dir + "/secret"
	if err := os.WriteFile(rootOnly, []byte("0 7fffffffffffffff "+secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	shm, err := os.CreateTemp("/dev/shm", "probekit-secret-")
	if err != nil {
		testkit.Unavailable(t, "no /dev/shm: %v", err)
	}
	shm.WriteString("0 7fffffffffffffff " + secret + "\n")
	shm.Chmod(0o600)
	shm.Close()
	t.Cleanup(func() { os.Remove(shm.Name()) })

	named := func(t *testing.T, pid int, addr uint64) (Frame, error) {
		t.Helper()
		p, err := New(nil).Process(pid)
		if err != nil {
			t.Fatal(err)
		}
		frames, err := p.Symbolize([]uint64{addr + 8})
		if err != nil {
			t.Fatal(err)
		}
		return frames[0], p.PerfMapErr()
	}
	refused := func(t *testing.T, pid int, addr uint64) {
		t.Helper()
		fr, err := named(t, pid, addr)
		if strings.Contains(fr.String(), secret) || fr.Function != "" {
			t.Fatalf("%#x named %q from a refused perf map", addr+8, fr.String())
		}
		if !errors.Is(err, procmaps.ErrNotOwned) || strings.Contains(err.Error(), secret) {
			t.Fatalf("PerfMapErr: %v, want procmaps.ErrNotOwned", err)
		}
		t.Logf("%v (%v)", fr, err)
	}

	t.Run("own", func(t *testing.T) {
		pid, addr := jitAsNobody(t, false, `true`)
		// The map is written once the address is known.
		path := "/tmp/perf-" + strconv.Itoa(pid) + ".map"
		if err := os.WriteFile(path, fmt.Appendf(nil, "%x 100 own_jit\n", addr), 0o644); err != nil {
			t.Fatal(err)
		}
		os.Chown(path, 65534, 65534)
		fr, err := named(t, pid, addr)
		if fr.Function != "own_jit" || fr.Offset != 8 || err != nil {
			t.Fatalf("%+v, %v; want own_jit+0x8", fr, err)
		}
	})
	t.Run("symlink", func(t *testing.T) {
		pid, addr := jitAsNobody(t, false, `ln -s `+rootOnly+` /tmp/perf-$$.map`)
		refused(t, pid, addr)
	})
	t.Run("hardlink", func(t *testing.T) {
		restore := protectedHardlinks(t, "0")
		pid, addr := jitAsNobody(t, false, `ln `+rootOnly+` /tmp/perf-$$.map`)
		restore()
		refused(t, pid, addr)
	})
	t.Run("other-user", func(t *testing.T) {
		pid, addr := jitAsNobody(t, false, `true`)
		path := "/tmp/perf-" + strconv.Itoa(pid) + ".map"
		if err := os.WriteFile(path, []byte("0 7fffffffffffffff "+secret+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		os.Chown(path, 12345, 12345)
		refused(t, pid, addr)
	})
	t.Run("userns-symlink", func(t *testing.T) {
		pid, addr := jitAsNobody(t, true, `ln -s `+shm.Name()+` /tmp/perf-$$.map`)
		refused(t, pid, addr)
	})
	t.Run("userns-bind-mount", func(t *testing.T) {
		pid, addr := jitAsNobody(t, true, `touch /tmp/perf-$$.map && mount --bind `+shm.Name()+` /tmp/perf-$$.map`)
		refused(t, pid, addr)
	})
}

// protectedHardlinks sets fs.protected_hardlinks and returns what puts
// the old value back (also run when the test ends).
func protectedHardlinks(t *testing.T, v string) func() {
	t.Helper()
	const sysctl = "/proc/sys/fs/protected_hardlinks"
	old, err := os.ReadFile(sysctl)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sysctl, []byte(v), 0); err != nil {
		t.Fatal(err)
	}
	done := false
	restore := func() {
		if !done {
			done = true
			if err := os.WriteFile(sysctl, old, 0); err != nil {
				t.Errorf("restore %s: %v", sysctl, err)
			}
		}
	}
	t.Cleanup(restore)
	return restore
}
