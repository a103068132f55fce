package procmaps

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A FIFO, a socket and a directory are refused at once: opening a FIFO
// for reading would otherwise block until a writer comes.
func TestOpenFileRefusesSpecialFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, c := range []struct{ path, kind string }{
		{fifo, "a FIFO"}, {sock, "a socket"}, {dir, "a directory"}, {"/dev/null", "a character device"},
	} {
		done := make(chan error, 1)
		go func() {
			f, err := OpenFile(c.path)
			if f != nil {
				f.Close()
			}
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), c.kind) || !strings.Contains(err.Error(), c.path) {
				t.Errorf("%s: %v, want ErrNotRegular naming %q and the path", c.path, err, c.kind)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: open blocked", c.path)
		}
		tg, err := OpenTarget(c.path)
		if err == nil {
			tg.Close()
			t.Errorf("OpenTarget(%s) succeeded", c.path)
		}
	}
}

func TestResolve(t *testing.T) {
	if p, err := Resolve("libc.so.6"); err != nil || !strings.HasSuffix(p, "/libc.so.6") {
		t.Errorf("libc.so.6: %q, %v", p, err)
	}
	if p, err := Resolve("sh"); err != nil || !filepath.IsAbs(p) {
		t.Errorf("sh: %q, %v", p, err)
	}
	if p, _ := Resolve("./x"); p != "./x" {
		t.Errorf("./x: %q", p)
	}
	if _, err := Resolve("no-such-program-or-library.so.9"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing name: %v", err)
	}
}

// A process target found by the base name of a mapped library is that
// mapping's file.
func TestProcessOpenTargetByLibraryName(t *testing.T) {
	p, err := Open(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	objs, err := p.Objects()
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Base(objs[0].Path)
	tg, err := p.OpenTarget(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	if tg.ID != objs[0].ID() || tg.Name != exe || tg.Process != p {
		t.Errorf("target %+v, want the mapping %s %v", tg, objs[0].Path, objs[0].ID())
	}
	if _, err := p.OpenTarget("no-such-library.so.1"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing: %v", err)
	}
}
