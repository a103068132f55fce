package testkit

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fixtureTimeout bounds every exchange with a fixture: a fixture that
// stops answering fails the test instead of hanging it.
const fixtureTimeout = 30 * time.Second

// Root returns the repository's root directory (where go.mod is).
func Root() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		panic("testkit: cannot locate source")
	}
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

// Fixture returns the path of a built fixture in testdata/bin
// ("usdt_sample", "libusdt_lib.so", ...).
func Fixture(name string) string {
	return filepath.Join(Root(), "testdata", "bin", name)
}

// Hit is one probe firing as the fixture reported it.
type Hit struct {
	Probe string
	// Args are the values the fixture passed, as the signed 64-bit
	// values bpf_usdt_arg() yields for them.
	Args []int64
	// Skipped is set when a semaphore gated the probe off.
	Skipped bool
}

// Process is a running fixture driven over its stdin (see
// testdata/fixture_driver.h for the protocol).
type Process struct {
	tb   testing.TB
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Reader
	pid  int
	done bool
	// exitErr is what Wait returned, once Stop has run.
	exitErr error
}

// Start runs the fixture at path and waits until it is ready. The process
// is stopped when the test ends.
func Start(tb testing.TB, path string, args ...string) *Process {
	tb.Helper()
	p, err := StartProcess(path, args...)
	if err != nil {
		tb.Fatal(err)
	}
	p.tb = tb
	tb.Cleanup(p.Stop)
	return p
}

// StartFixtureAs is Start with the fixture run as uid and gid id
// (NobodyUID): a process of another user than the test's.
func StartFixtureAs(tb testing.TB, id int, path string, args ...string) *Process {
	tb.Helper()
	cmd := exec.Command(path, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(id), Gid: uint32(id)}}
	p, err := startCmd(cmd, path)
	if err != nil {
		tb.Fatal(err)
	}
	p.tb = tb
	tb.Cleanup(p.Stop)
	return p
}

// StartProcess is Start for benchmarks and helpers that manage the
// process's lifetime themselves (call Stop).
func StartProcess(path string, args ...string) (*Process, error) {
	return startCmd(exec.Command(path, args...), path)
}

// startCmd starts the fixture cmd runs and waits until it is ready.
func startCmd(cmd *exec.Cmd, path string) (*Process, error) {
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		in.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		in.Close()
		out.Close()
		return nil, fmt.Errorf("start fixture %s: %w (run `make testdata`?)", path, err)
	}
	p := &Process{cmd: cmd, in: in, out: bufio.NewReader(out)}
	line, err := p.readLine()
	if err != nil {
		p.Stop()
		return nil, err
	}
	if _, err := fmt.Sscanf(line, "ready %d", &p.pid); err != nil {
		p.Stop()
		return nil, fmt.Errorf("fixture %s: unexpected greeting %q", path, line)
	}
	return p, nil
}

// PID is the fixture's process id.
func (p *Process) PID() int { return p.pid }

// Fire makes the fixture fire probe n times and returns the hits it
// reported (one per site and round, in order).
func (p *Process) Fire(probe string, n int) []Hit {
	hits, err := p.command(fmt.Sprintf("fire %s %d", probe, n))
	if err != nil {
		p.fail(err)
	}
	return hits
}

// Loop makes the fixture fire probe n times without reporting hits.
func (p *Process) Loop(probe string, n int) error {
	_, err := p.command(fmt.Sprintf("loop %s %d", probe, n))
	return err
}

func (p *Process) command(cmd string) ([]Hit, error) {
	if _, err := io.WriteString(p.in, cmd+"\n"); err != nil {
		return nil, fmt.Errorf("fixture pid %d: %s: %w", p.pid, cmd, err)
	}
	var hits []Hit
	for {
		line, err := p.readLine()
		if err != nil {
			return nil, fmt.Errorf("fixture pid %d: %s: %w", p.pid, cmd, err)
		}
		fields := strings.Fields(line)
		switch {
		case line == "done":
			return hits, nil
		case len(fields) >= 2 && fields[0] == "hit":
			h := Hit{Probe: fields[1]}
			for _, f := range fields[2:] {
				v, err := strconv.ParseInt(f, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("fixture pid %d: bad value in %q", p.pid, line)
				}
				h.Args = append(h.Args, v)
			}
			hits = append(hits, h)
		case len(fields) == 2 && fields[0] == "skip":
			hits = append(hits, Hit{Probe: fields[1], Skipped: true})
		default:
			return nil, fmt.Errorf("fixture pid %d: %s: %s", p.pid, cmd, line)
		}
	}
}

// readLine reads one line, failing after fixtureTimeout.
func (p *Process) readLine() (string, error) {
	type result struct {
		line string
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		line, err := p.out.ReadString('\n')
		ch <- result{strings.TrimSpace(line), err}
	}()
	select {
	case r := <-ch:
		return r.line, r.err
	case <-time.After(fixtureTimeout):
		p.cmd.Process.Kill()
		return "", fmt.Errorf("fixture did not answer within %v", fixtureTimeout)
	}
}

// Do sends command and returns the lines the fixture printed before
// "done", for fixtures whose answers are not hits (testdata/goprog,
// testdata/cfix); a line starting with "error" fails the test.
func (p *Process) Do(command string) []string {
	if _, err := io.WriteString(p.in, command+"\n"); err != nil {
		p.fail(fmt.Errorf("fixture pid %d: %s: %w", p.pid, command, err))
	}
	var lines []string
	for {
		line, err := p.readLine()
		if err != nil {
			p.fail(fmt.Errorf("fixture pid %d: %s: %w (crashed?)", p.pid, command, err))
		}
		if line == "done" {
			return lines
		}
		if strings.HasPrefix(line, "error") {
			p.fail(fmt.Errorf("fixture pid %d: %s: %s", p.pid, command, line))
		}
		lines = append(lines, line)
	}
}

func (p *Process) fail(err error) {
	if p.tb != nil {
		p.tb.Helper()
		p.tb.Fatal(err)
	}
	panic(err)
}

// Stop asks the fixture to quit and waits for it; it kills a fixture that
// does not exit. Safe to call more than once.
func (p *Process) Stop() {
	if p.done {
		return
	}
	p.done = true
	io.WriteString(p.in, "quit\n")
	p.in.Close()
	exited := make(chan struct{})
	go func() {
		p.exitErr = p.cmd.Wait()
		close(exited)
	}()
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		p.cmd.Process.Kill()
		<-exited
	}
}

// Exit stops the fixture as Stop does and returns how it ended: nil when
// it exited with status 0, the wait error otherwise (a signal: it crashed,
// or did not quit within Stop's 5 seconds and was killed).
func (p *Process) Exit() error {
	p.Stop()
	return p.exitErr
}

// Kill ends the fixture at once (SIGKILL) and reaps it.
func (p *Process) Kill() {
	if p.done {
		return
	}
	p.done = true
	p.cmd.Process.Kill()
	p.in.Close()
	p.cmd.Wait()
}
