package main

import (
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/probekit/probekit/internal/test/testkit"
)

// postgresBin is Debian's PostgreSQL 15, built with --enable-dtrace.
const postgresBin = "/usr/lib/postgresql/15/bin"

// pgCluster is a throwaway PostgreSQL cluster under a temporary directory,
// run as the postgres user, reachable only on a private unix socket. Its
// postmaster is a child of the test, so that tests can trace it by PID.
type pgCluster struct {
	dir, sock  string
	cred       *syscall.Credential
	postmaster *exec.Cmd
	log        testkit.Buffer
	stopOnce   sync.Once
}

func startPostgres(t *testing.T) *pgCluster {
	t.Helper()
	for _, tool := range []string{"initdb", "postgres", "psql"} {
		if _, err := os.Stat(filepath.Join(postgresBin, tool)); err != nil {
			testkit.Unavailable(t, "no PostgreSQL 15 (postgresql-15, make deps): %v", err)
		}
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		testkit.Unavailable(t, "no postgres user: %v", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	// Not t.TempDir: the postgres user must reach it.
	dir, err := os.MkdirTemp("", "probekit-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	c := &pgCluster{dir: dir, sock: filepath.Join(dir, "sock"), cred: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	data := filepath.Join(dir, "data")
	for _, d := range []string{c.sock, data} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	c.run(t, "initdb", "-D", data, "-A", "trust", "-U", "postgres", "--no-sync")
	pm := exec.Command(filepath.Join(postgresBin, "postgres"), "-D", data, "-k", c.sock, "-c", "listen_addresses=", "-c", "fsync=off")
	pm.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	pm.Dir = dir
	pm.Stdout, pm.Stderr = &c.log, &c.log
	if err := pm.Start(); err != nil {
		t.Fatal(err)
	}
	c.postmaster = pm
	t.Cleanup(c.stop)
	for deadline := time.Now().Add(30 * time.Second); c.psql("select 1") != nil; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("postgres not ready within 30s:\n%s", c.log.String())
		}
	}
	return c
}

// stop shuts the cluster down (fast shutdown) and waits for it, once.
func (c *pgCluster) stop() {
	c.stopOnce.Do(func() {
		c.postmaster.Process.Signal(syscall.SIGINT)
		c.postmaster.Wait()
	})
}

// psql runs one SQL command on the cluster.
func (c *pgCluster) psql(sql string) error {
	cmd := exec.Command(filepath.Join(postgresBin, "psql"), "-X", "-h", c.sock, "-U", "postgres", "-d", "postgres", "-Atc", sql)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	cmd.Dir = c.dir
	return cmd.Run()
}

// run runs a PostgreSQL program as postgres and returns its output.
func (c *pgCluster) run(t *testing.T, prog string, args ...string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(postgresBin, prog), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	cmd.Dir = c.dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", prog, args, err, out)
	}
	return string(out)
}

// trace runs probekit trace --json -f -p POSTMASTER ARGS..., calls work
// (given the output so far) once the postmaster is attached, then stops
// the postmaster (SIGINT: the trace ends with it) and returns the output
// and the errors. Signal only: the trace follows the postmaster with
// ptrace from this process, so waiting for it (c.stop, at cleanup) must
// come after the trace let it go.
func (c *pgCluster) trace(t *testing.T, work func(out *testkit.Buffer), args ...string) (out, errOut string) {
	t.Helper()
	pm := c.postmaster
	var o, e testkit.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(append([]string{"trace", "--json", "-f", "-p", strconv.Itoa(pm.Process.Pid)}, args...), &o, &e)
	}()
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(o.String(), `"kind":"attach","pid":`+strconv.Itoa(pm.Process.Pid)); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("postmaster not attached within 20s: %s", e.String())
		}
	}
	work(&o)
	pm.Process.Signal(syscall.SIGINT)
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d: %s", code, e.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("trace did not end with the postmaster")
	}
	return o.String(), e.String()
}
