package main

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/probekit/probekit/internal/privilege"
	"github.com/probekit/probekit/internal/test/testkit"
)

// buildProbekit returns the path of this command, in a directory every
// user may enter: a copy of this test binary named probekit, which
// TestMain runs as the command (main). A go build per test took about
// 100 s under the kernel matrix's emulation (5.10), as long as the
// test's own work several times over.
func buildProbekit(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(testkit.SharedTempDir(t), "probekit")
	testkit.CopyFile(t, self, bin)
	return bin
}

// asNobody is bin ARGS run as uid and gid 65534 with exactly caps as
// its ambient (hence effective) capabilities, in "/", with no $HOME.
func asNobody(bin string, caps []privilege.Cap, args ...string) *exec.Cmd {
	cmd := exec.Command(bin, args...)
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	amb := make([]uintptr, len(caps))
	for i, c := range caps {
		amb[i] = uintptr(c)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential:  &syscall.Credential{Uid: testkit.NobodyUID, Gid: testkit.NobodyUID},
		AmbientCaps: amb,
	}
	return cmd
}

// privilegeFixture starts a copy of usdt_sample, as root, from a
// directory only root may enter, and returns it with the copy's path.
func privilegeFixture(t *testing.T) (*testkit.Process, string) {
	t.Helper()
	secret := t.TempDir()
	if err := os.Chmod(secret, 0o700); err != nil {
		t.Fatal(err)
	}
	fx := filepath.Join(secret, "usdt_sample")
	testkit.CopyFile(t, testkit.Fixture("usdt_sample"), fx)
	return testkit.Start(t, fx), fx
}

// TestTraceAsNobody: nobody, with exactly the capabilities the privilege
// table names for `trace -p` of root's process on a file it may not
// read (loading, another user's process, an unreadable file), counts
// every hit the kernel saw after the attach; without any one of them,
// trace fails naming it and how to grant it.
func TestTraceAsNobody(t *testing.T) {
	testkit.RequireKernel(t) // root, to start the trace as nobody
	caps, err := privilege.Required(privilege.LoadBPF, privilege.LockMemory, privilege.OtherUser, privilege.UnreadableFile)
	if err != nil {
		t.Fatal(err)
	}
	bin := buildProbekit(t)
	p, fx := privilegeFixture(t)
	args := []string{"trace", "--json", "--count", "-i", "1", "-p", strconv.Itoa(p.PID()), "uprobe:" + fx + ":fire_loop"}

	refusedWithout(t, bin, caps, args)
	t.Run("all", func(t *testing.T) { countsAsNobody(t, bin, caps, args, "uprobe:fire_loop", p, false) })
}

// TestTraceOwnProcessAsNobody: nobody traces a process of its own with
// only what loading needs (CAP_BPF and CAP_PERFMON from 5.8): no
// CAP_SYS_PTRACE, no CAP_DAC_READ_SEARCH; without either of those two it
// is refused naming it.
func TestTraceOwnProcessAsNobody(t *testing.T) {
	testkit.RequireKernel(t) // root, to start the trace as nobody
	caps, err := privilege.Required(privilege.LoadBPF, privilege.LockMemory)
	if err != nil {
		t.Fatal(err)
	}
	bin := buildProbekit(t)
	fx := filepath.Join(filepath.Dir(bin), "usdt_sample")
	testkit.CopyFile(t, testkit.Fixture("usdt_sample"), fx)
	if err := os.Chmod(fx, 0o755); err != nil {
		t.Fatal(err)
	}
	p := testkit.StartFixtureAs(t, testkit.NobodyUID, fx)
	args := []string{"trace", "--json", "--count", "-i", "1", "-p", strconv.Itoa(p.PID()), "uprobe:" + fx + ":fire_loop"}
	refusedWithout(t, bin, caps, args)
	t.Run("all", func(t *testing.T) { countsAsNobody(t, bin, caps, args, "uprobe:fire_loop", p, false) })
}

// TestTraceHostWideAsNobody: a host-wide trace of a glob target, as
// nobody with exactly the table's capabilities for it (loading, other
// users' processes, unreadable files), counts every hit of root's
// process in a directory only root may enter; without any one of them it
// is refused naming it (before, it ran and missed other users' processes
// without a word).
func TestTraceHostWideAsNobody(t *testing.T) {
	testkit.RequireKernel(t) // root, to start the trace as nobody
	caps, err := privilege.Required(privilege.LoadBPF, privilege.LockMemory, privilege.OtherUser, privilege.UnreadableFile)
	if err != nil {
		t.Fatal(err)
	}
	bin := buildProbekit(t)
	p, fx := privilegeFixture(t)
	args := []string{"trace", "--json", "--count", "-i", "1", filepath.Dir(fx) + "/usdt_sampl*:sample:loop"}
	refusedWithout(t, bin, caps, args)
	t.Run("all", func(t *testing.T) { countsAsNobody(t, bin, caps, args, "sample:loop", p, true) })
}

// refusedWithout runs probekit ARGS as nobody with caps less each one in
// turn: every run exits 1 with nothing on stdout, naming the capability
// taken away and the grants that give the whole set.
func refusedWithout(t *testing.T, bin string, caps []privilege.Cap, args []string) {
	t.Helper()
	for _, c := range caps {
		t.Run("without "+c.String(), func(t *testing.T) {
			cmd := asNobody(bin, slices.DeleteFunc(slices.Clone(caps), func(d privilege.Cap) bool { return d == c }), args...)
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			timer := time.AfterFunc(time.Minute, func() { cmd.Process.Kill() })
			err := cmd.Run()
			timer.Stop()
			msg := stderr.String()
			if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 1 || stdout.Len() != 0 {
				t.Fatalf("%v, stdout %q, stderr %q; want exit 1 and nothing on stdout", err, stdout.String(), msg)
			}
			want := []string{"probekit trace: tracing lacks " + c.String() + ": ", "setcap ", "AmbientCapabilities=", "securityContext.capabilities.add: ["}
			// The grant is the whole set: setcap replaces a file's.
			for _, d := range caps {
				want = append(want, strings.ToLower(d.String()))
			}
			for _, w := range want {
				if !strings.Contains(msg, w) {
					t.Errorf("stderr %q lacks %q", msg, w)
				}
			}
		})
	}

}

// countsAsNobody runs probekit ARGS (a --json --count -i 1 trace) as
// nobody with caps, fires p's loop until a hit of probe is counted, and
// checks that the 1000 fired after that are counted exactly, once p
// exits and the trace ends (a hostWide one by Ctrl-C).
func countsAsNobody(t *testing.T, bin string, caps []privilege.Cap, args []string, probe string, p *testkit.Process, hostWide bool) {
	cmd := asNobody(bin, caps, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	counts := make(chan uint64, 1024)
	finished := make(chan struct{})
	var waitErr error
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var c struct {
				countLine
				Kind string
			}
			if json.Unmarshal(sc.Bytes(), &c) == nil && !followNotice(c.Kind) && c.Probe == probe {
				counts <- c.Count
			}
		}
		close(counts)
		waitErr = cmd.Wait() // once stdout is read to its end
		close(finished)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		for range counts {
		}
		<-finished
	})
	ended := func(what string) {
		t.Helper()
		for range counts {
		}
		<-finished
		t.Fatalf("trace as nobody with %v ended %s: %v; stderr %q", caps, what, waitErr, stderr.String())
	}
	// Attached once an interval line counts a hit: fire until then.
	var base uint64
	deadline := time.After(30 * time.Second)
	for attached := false; !attached; {
		select {
		case c, ok := <-counts:
			if !ok {
				ended("before it counted a hit")
			}
			base, attached = c, c > 0
		case <-deadline:
			t.Fatalf("no hit counted within 30 s; stderr %q", stderr.String())
		case <-time.After(10 * time.Millisecond):
			if err := p.Loop("loop", 1); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Quiet for 2.5 s: the last line (of every second) counts every
	// hit fired so far.
	for quiet := time.After(2500 * time.Millisecond); ; {
		select {
		case c, ok := <-counts:
			if !ok {
				ended("while quiet")
			}
			base = c
			continue
		case <-quiet:
		}
		break
	}
	const n = 1000
	if err := p.Loop("loop", n); err != nil {
		t.Fatal(err)
	}
	last := base
	if hostWide {
		// A host-wide trace outlives the process: wait for the count,
		// then 2.5 s quiet, then Ctrl-C.
		for end := time.After(30 * time.Second); last-base < n; {
			select {
			case c, ok := <-counts:
				if !ok {
					ended("before it counted the hits")
				}
				last = c
			case <-end:
				t.Fatalf("counted %d of %d hits within 30 s", last-base, n)
			}
		}
		if err := p.Exit(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2500 * time.Millisecond)
		cmd.Process.Signal(os.Interrupt)
	} else if err := p.Exit(); err != nil {
		t.Fatal(err)
	}
	// The traced process gone (or the trace interrupted), trace prints
	// the counts and ends.
	for end := time.After(30 * time.Second); ; {
		select {
		case c, ok := <-counts:
			if ok {
				last = c
				continue
			}
		case <-end:
			t.Fatal("trace did not end within 30 s of the process")
		}
		break
	}
	<-finished
	if waitErr != nil {
		t.Fatalf("trace: %v; stderr %q", waitErr, stderr.String())
	}
	if last-base != n {
		t.Fatalf("counted %d hits after the attach (%d then %d), want %d", last-base, base, last, n)
	}
}

// TestTraceLaunchedAsNobody: nobody with exactly the capabilities the
// table names for trace -- CMD (CAP_BPF and CAP_PERFMON where Yama
// allows PTRACE_TRACEME) counts every hit of the command it launched, by
// probe, with -f, and by stack.
func TestTraceLaunchedAsNobody(t *testing.T) {
	testkit.RequireKernel(t) // root, to start the trace as nobody
	caps, err := privilege.Required(privilege.LoadBPF, privilege.LockMemory, privilege.LaunchTraced)
	if err != nil {
		t.Fatal(err)
	}
	bin := buildProbekit(t)
	fx := filepath.Join(filepath.Dir(bin), "usdt_sample")
	testkit.CopyFile(t, testkit.Fixture("usdt_sample"), fx)
	if err := os.Chmod(fx, 0o755); err != nil {
		t.Fatal(err)
	}
	const n = 250
	run := func(args ...string) string {
		t.Helper()
		cmd := asNobody(bin, caps, append(append([]string{"trace", "--json", "--count"}, args...), "uprobe:"+fx+":fire_loop", "--", fx, "--loop", "loop", strconv.Itoa(n))...)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		timer := time.AfterFunc(time.Minute, func() { cmd.Process.Kill() })
		defer timer.Stop()
		if err := cmd.Run(); err != nil {
			t.Fatalf("trace %v as nobody with %v: %v; stderr %q", args, caps, err, stderr.String())
		}
		return stdout.String()
	}
	for _, args := range [][]string{nil, {"-f"}} {
		var counts []string
		for _, line := range strings.Split(strings.TrimSpace(run(args...)), "\n") {
			var n struct{ Kind string }
			if json.Unmarshal([]byte(line), &n) != nil || !followNotice(n.Kind) {
				counts = append(counts, line)
			}
		}
		if got, want := strings.Join(counts, "\n"), `{"probe":"uprobe:fire_loop","count":250}`; got != want {
			t.Errorf("--count %v: %q, want %q", args, got, want)
		}
	}
	var total uint64
	for _, line := range strings.Split(strings.TrimSpace(run("--stack")), "\n") {
		var s struct {
			Key struct {
				Stack []struct{ Function string }
			}
			Count uint64
		}
		if err := json.Unmarshal([]byte(line), &s); err != nil || len(s.Key.Stack) == 0 || s.Key.Stack[0].Function != "fire_loop" {
			t.Fatalf("--count --stack line %q (%v): want stacks from fire_loop", line, err)
		}
		total += s.Count
	}
	if total != n {
		t.Errorf("--count --stack: %d hits, want %d", total, n)
	}
}
