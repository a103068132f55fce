package procmaps

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// payload is a command that leaves a mark when it runs.
func payload(t *testing.T) (cmd *exec.Cmd, mark string) {
	t.Helper()
	mark = filepath.Join(t.TempDir(), "ran")
	return exec.Command("/bin/sh", "-c", `echo ran > "$0"`, mark), mark
}

func ran(t *testing.T, mark string) bool {
	t.Helper()
	_, err := os.Stat(mark)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return err == nil
}

// processState is the state letter of /proc/PID/stat ("t": stopped by
// its tracer).
func processState(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	_, after, _ := strings.Cut(string(b), ") ")
	state, _, _ := strings.Cut(after, " ")
	return state
}

// TestLaunchFinish: a launched command is stopped after its execve (the
// new program is mapped, none of it has run) until Finish(nil); a later
// Finish changes nothing.
func TestLaunchFinish(t *testing.T) {
	cmd, mark := payload(t)
	l, err := Launch(cmd)
	if err != nil {
		t.Fatal(err)
	}
	if l.Process.PID != cmd.Process.Pid {
		t.Errorf("Process %v, command pid %d", l.Process, cmd.Process.Pid)
	}
	if s := processState(t, l.Process.PID); s != "t" {
		t.Errorf("state %q after Launch, want t (traced stop)", s)
	}
	want, _ := filepath.EvalSymlinks(cmd.Path)
	if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", l.Process.PID)); err != nil || exe != want {
		t.Errorf("exe %q, %v: want %s, the launched program", exe, err, want)
	}
	if ran(t, mark) {
		t.Fatal("the command ran before Finish")
	}
	if err := l.Finish(nil); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if !ran(t, mark) {
		t.Fatal("the command did not run after Finish(nil)")
	}
	late := errors.New("late")
	if err := l.Finish(late); err != late {
		t.Errorf("second Finish = %v, want its argument", err)
	}
}

// TestLaunchFinishError: Finish with an error kills the stopped command
// before it runs, reaps it and returns the error.
func TestLaunchFinishError(t *testing.T) {
	cmd, mark := payload(t)
	l, err := Launch(cmd)
	if err != nil {
		t.Fatal(err)
	}
	attachErr := errors.New("attach failed")
	if err := l.Finish(attachErr); err != attachErr {
		t.Fatalf("Finish = %v, want %v", err, attachErr)
	}
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if cmd.ProcessState == nil || !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Errorf("state %v, want reaped after SIGKILL", cmd.ProcessState)
	}
	if ran(t, mark) {
		t.Error("the command ran")
	}
	if err := l.Finish(nil); err != nil {
		t.Errorf("second Finish(nil) = %v", err)
	}
}

// TestLaunchMissing: a command that cannot start is an error naming it.
func TestLaunchMissing(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	if _, err := Launch(exec.Command(missing)); err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("Launch(%s) = %v", missing, err)
	}
}

// launchHelperEnv carries the mark path to the test binary re-run as a
// tracer that is killed.
const launchHelperEnv = "PROBEKIT_PROCMAPS_LAUNCH_MARK"

// TestLaunchTracerKilled: a tracer killed between Launch and Finish takes
// its stopped command with it: the command dies of SIGKILL and never runs
// (PTRACE_O_EXITKILL). Without it, the command would carry on untraced.
// This process is made a child subreaper, so that the orphaned command is
// reparented here and its end can be waited for and read.
func TestLaunchTracerKilled(t *testing.T) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Skipf("PR_SET_CHILD_SUBREAPER: %v", err)
	}
	t.Cleanup(func() { unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) })
	mark := filepath.Join(t.TempDir(), "ran")
	tracer := exec.Command(os.Args[0], "-test.run=^TestLaunchHelper$")
	tracer.Env = append(os.Environ(), launchHelperEnv+"="+mark)
	tracer.Stderr = os.Stderr
	out, err := tracer.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := tracer.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tracer.Process.Kill(); tracer.Wait() })

	// The helper prints the launched command's PID and start time.
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(out).ReadString('\n')
		line <- s
	}()
	var child Process
	select {
	case s := <-line:
		if _, err := fmt.Sscanf(s, "launched %d %d", &child.PID, &child.StartTime); err != nil {
			t.Fatalf("helper said %q: %v", s, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the helper did not launch within 10s")
	}
	if err := tracer.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	tracer.Wait()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := child.WaitExit(ctx); err != nil {
		t.Fatalf("the launched command (pid %d) outlived its tracer by 10s: %v", child.PID, err)
	}
	var ws unix.WaitStatus
	if pid, err := unix.Wait4(child.PID, &ws, unix.WNOHANG, nil); err != nil || pid != child.PID {
		t.Fatalf("reaping pid %d: %d, %v", child.PID, pid, err)
	}
	if !ws.Signaled() || ws.Signal() != unix.SIGKILL {
		t.Errorf("the launched command ended with status %#x, want SIGKILL", uint32(ws))
	}
	if ran(t, mark) {
		t.Error("the launched command ran its payload after its tracer died")
	}
}

// TestLaunchHelper is the tracer of TestLaunchTracerKilled: it launches
// the payload, says so, and waits to be killed.
func TestLaunchHelper(t *testing.T) {
	mark := os.Getenv(launchHelperEnv)
	if mark == "" {
		t.Skip("run by TestLaunchTracerKilled")
	}
	l, err := Launch(exec.Command("/bin/sh", "-c", `echo ran > "$0"`, mark))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("launched %d %d\n", l.Process.PID, l.Process.StartTime)
	time.Sleep(time.Minute)
	t.Error("not killed within a minute")
	l.Finish(errors.New("not killed"))
}

// TestLaunchWatch: a watched command is stopped at each later execve and
// at its exit, with its maps whole: at the exit of sh -c 'exec cat'
// (cat reads nothing and exits at once), the maps read in the hook hold
// the new image and libc, which the dynamic linker mapped after the
// exec stop. Wait gets the exit status; a signal sent meanwhile is
// delivered.
func TestLaunchWatch(t *testing.T) {
	cat, err := exec.LookPath("cat")
	if err != nil {
		t.Skip("no cat")
	}
	cmd := exec.Command("/bin/sh", "-c", "exec "+cat+" /dev/null; exit 3")
	l, err := Launch(cmd)
	if err != nil {
		t.Fatal(err)
	}
	var events []LaunchEvent
	var atExit, atEntry []Mapping
	l.Watch(func(ev LaunchEvent) {
		events = append(events, ev)
		switch ev {
		case LaunchExit:
			atExit, _, _ = l.Process.Mappings()
		case LaunchEntry:
			atEntry, _, _ = l.Process.Mappings()
		}
	})
	if err := l.Finish(nil); err != nil {
		t.Fatal(err)
	}
	if err := l.Wait(); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	// sh's entry point, its exec of cat, cat's entry point, cat's exit.
	want := []LaunchEvent{LaunchEntry, LaunchExec, LaunchEntry, LaunchExit}
	if runtime.GOARCH != "amd64" {
		want = []LaunchEvent{LaunchExec, LaunchExit}
	}
	if !slices.Equal(events, want) {
		t.Errorf("events %v, want %v", events, want)
	}
	holds := func(when string, maps []Mapping) {
		t.Helper()
		var image, libc bool
		for _, m := range maps {
			image = image || m.Path == cat
			libc = libc || strings.HasPrefix(filepath.Base(m.Path), "libc.so")
		}
		if !image || !libc {
			t.Errorf("maps at %s hold %s: %v, libc: %v (%d mappings)", when, cat, image, libc, len(maps))
		}
	}
	holds("exit", atExit)
	if runtime.GOARCH == "amd64" {
		// At cat's entry point its libraries are mapped.
		holds("entry", atEntry)
	}

	// A signal for the command while it is traced is delivered: killed
	// by SIGTERM, as without tracing.
	cmd = exec.Command("/bin/sh", "-c", "kill -TERM $$; sleep 5")
	if l, err = Launch(cmd); err != nil {
		t.Fatal(err)
	}
	l.Watch(func(LaunchEvent) {})
	if err := l.Finish(nil); err != nil {
		t.Fatal(err)
	}
	err = l.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
		t.Errorf("Wait: %v, want killed by SIGTERM", err)
	}
}

// TestLaunchEntry: at LaunchEntry the program has not run (its mark not
// written yet), its libraries are mapped, and after it the program runs
// as if never stopped (the breakpoint's instruction put back).
func TestLaunchEntry(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("LaunchEntry is x86-64's")
	}
	mark := filepath.Join(t.TempDir(), "ran")
	cmd := exec.Command("/bin/sh", "-c", `echo ran > "$0"; exit 7`, mark)
	l, err := Launch(cmd)
	if err != nil {
		t.Fatal(err)
	}
	entries := 0
	var early string
	l.Watch(func(ev LaunchEvent) {
		if ev != LaunchEntry {
			return
		}
		entries++
		maps, _, _ := l.Process.Mappings()
		libc := false
		for _, m := range maps {
			libc = libc || strings.HasPrefix(filepath.Base(m.Path), "libc.so")
		}
		if !libc {
			early += "libc not mapped; "
		}
		if _, err := os.Stat(mark); err == nil {
			early += "ran before its entry point"
		}
	})
	if err := l.Finish(nil); err != nil {
		t.Fatal(err)
	}
	err = l.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 7 {
		t.Errorf("Wait: %v, want exit status 7", err)
	}
	if !ran(t, mark) {
		t.Error("the command did not run on after its entry point")
	}
	if entries != 1 || early != "" {
		t.Errorf("%d entry stops (want 1): %s", entries, early)
	}
}
