package main

import (
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/probekit/probekit/internal/test/testkit"
)

// followPGBin holds Debian's PostgreSQL 15 server, built with --enable-dtrace.
const followPGBin = "/usr/lib/postgresql/15/bin"

// followAsPostgres runs cmd as the postgres user.
func followAsPostgres(t *testing.T, cmd *exec.Cmd) *exec.Cmd {
	t.Helper()
	u, err := user.Lookup("postgres")
	if err != nil {
		testkit.Unavailable(t, "no postgres user: %v", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	return cmd
}

// TestTraceFollowPostgres: -f -p <postmaster> sees the queries of backends
// the postmaster forks after the trace started.
func TestTraceFollowPostgres(t *testing.T) {
	testkit.RequireKernel(t)
	for _, tool := range []string{followPGBin + "/initdb", followPGBin + "/postgres", "/usr/bin/psql"} {
		if _, err := os.Stat(tool); err != nil {
			testkit.Unavailable(t, "PostgreSQL test needs %s: %v", tool, err)
		}
	}
	dir, err := os.MkdirTemp("", "probekit-pg-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	data, sock := filepath.Join(dir, "data"), filepath.Join(dir, "sock")
	for _, d := range []string{data, sock} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		testkit.Unavailable(t, "no postgres user: %v", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	for _, d := range []string{data, sock} {
		if err := os.Chown(d, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := followAsPostgres(t, exec.Command(followPGBin+"/initdb", "-D", data, "-A", "trust", "-U", "postgres", "--no-sync")).CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	pm := followAsPostgres(t, exec.Command(followPGBin+"/postgres", "-D", data, "-k", sock, "-c", "listen_addresses=", "-c", "fsync=off"))
	var pmLog syncBuffer
	pm.Stdout, pm.Stderr = &pmLog, &pmLog
	if err := pm.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		pm.Process.Signal(syscall.SIGINT) // fast shutdown
		pm.Wait()
	}()
	psql := func(sql string) error {
		return followAsPostgres(t, exec.Command("/usr/bin/psql", "-h", sock, "-U", "postgres", "-d", "postgres", "-Atc", sql)).Run()
	}
	for deadline := time.Now().Add(30 * time.Second); psql("select 1") != nil; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("postgres not ready within 30s:\n%s", pmLog.String())
		}
	}

	var out, errOut syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run([]string{"trace", "--json", "-f", "--str", "1", "-p", strconv.Itoa(pm.Process.Pid), followPGBin + "/postgres:postgresql:query__start"}, &out, &errOut)
	}()
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(out.String(), `"kind":"attach","pid":`+strconv.Itoa(pm.Process.Pid)); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("postmaster not attached within 20s: %s", errOut.String())
		}
	}
	const query = "select 4242 + 1"
	if err := psql(query); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(out.String(), query); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("query not seen within 20s:\n%s\n%s", out.String(), errOut.String())
		}
	}
	pm.Process.Signal(syscall.SIGINT)
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("trace did not end with the postmaster")
	}
	for _, l := range decodeFollow(t, out.String()) {
		if l.Kind == "usdt" && len(l.Args) == 1 && strings.Contains(string(l.Args[0]), query) {
			if l.PID == pm.Process.Pid {
				t.Fatalf("the query ran in the postmaster (pid %d), not in a backend", l.PID)
			}
			return
		}
	}
	t.Fatalf("no query__start hit with %q:\n%s", query, out.String())
}
