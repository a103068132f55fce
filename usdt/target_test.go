package usdt_test

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/probekit/probekit/attach"
	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/procmaps"
	"github.com/probekit/probekit/usdt"
)

// A bare library name with a PID is the library that process maps, as
// libbpf resolves SEC("usdt/libfoo.so:...") names; sites carry the name
// as given.
func TestAttachByLibraryName(t *testing.T) {
	testkit.RequireKernel(t)
	tr := newTracer(t, false)
	p := testkit.Start(t, testkit.Fixture("usdt_lib_user"))
	l := tr.attach("libusdt_lib.so", "sample", "libonly", &usdt.Options{PID: p.PID()})
	if s := l.Sites(); len(s) != 1 || s[0].Path != "libusdt_lib.so" {
		t.Fatalf("sites %+v", s)
	}
	want := p.Fire("libonly", 2)
	got := tr.hits(len(want))
	for i := range want {
		if got[i].ArgVal[0] != want[i].Args[0] {
			t.Errorf("hit %d: %d, want %d", i, got[i].ArgVal[0], want[i].Args[0])
		}
	}
}

// AutoAttach resolves the target of SEC("usdt/TARGET:PROVIDER:NAME") as
// Attach does: a library name of the process.
func TestAutoAttachResolvesNames(t *testing.T) {
	testkit.RequireKernel(t)
	tr := newTracer(t, false)
	tr.spec.Programs["args_reader"].SectionName = "usdt/libusdt_lib.so:sample:libonly"
	p := testkit.Start(t, testkit.Fixture("usdt_lib_user"))
	links, err := tr.att.AutoAttach(tr.spec, tr.coll, &usdt.Options{PID: p.PID()})
	if err != nil {
		t.Fatal(err)
	}
	defer links[0].Close()
	want := p.Fire("libonly", 1)
	if got := tr.hits(1); got[0].ArgVal[0] != want[0].Args[0] {
		t.Errorf("hit %d, want %d", got[0].ArgVal[0], want[0].Args[0])
	}
}

// A program name is found on PATH by the library API, as by the command.
func TestAttachProgramOnPATH(t *testing.T) {
	testkit.RequireKernel(t)
	needPathWidePIE(t)
	dir := t.TempDir()
	testkit.CopyFile(t, testkit.Fixture("usdt_sample"), filepath.Join(dir, "probekit-sample"))
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	tr := newTracer(t, false)
	l := tr.attach("probekit-sample", "sample", "zero", nil)
	if s := l.Sites(); s[0].Path != "probekit-sample" {
		t.Errorf("site path %q, want the name as given", s[0].Path)
	}
	p := testkit.Start(t, filepath.Join(dir, "probekit-sample"))
	p.Fire("zero", 1)
	tr.hits(1)
}

// Errors name the target as the caller gave it, never the descriptor the
// kernel is given.
func TestAttachErrorsNameTarget(t *testing.T) {
	testkit.RequireKernel(t)
	tr := newTracer(t, false)
	p := testkit.Start(t, testkit.Fixture("usdt_sample"))
	path := testkit.Fixture("usdt_sample")
	for _, opts := range []*usdt.Options{nil, {PID: p.PID()}} {
		_, err := tr.att.Attach(tr.prog(), path, "sample", "nosuch", opts)
		if !errors.Is(err, usdt.ErrNotFound) || !strings.Contains(err.Error(), path) || strings.Contains(err.Error(), "/proc/self/fd") {
			t.Errorf("opts %+v: %v, want ErrNotFound naming %s", opts, err, path)
		}
	}
	_, err := tr.att.Attach(tr.prog(), "no-such-library.so.1", "sample", "zero", &usdt.Options{PID: p.PID()})
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "no-such-library.so.1") {
		t.Errorf("missing library: %v", err)
	}
}

// FIFOs, sockets and directories are refused at once: reading a FIFO
// would block until a writer came.
func TestSpecialFilesRefused(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{fifo, dir} {
		done := make(chan error, 2)
		go func() {
			_, err := usdt.Open(path)
			done <- err
			_, err = usdt.NewCache().Open(path)
			done <- err
		}()
		for range 2 {
			select {
			case err := <-done:
				if !errors.Is(err, procmaps.ErrNotRegular) || !strings.Contains(err.Error(), path) {
					t.Errorf("%s: %v, want ErrNotRegular naming it", path, err)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("%s: open blocked", path)
			}
		}
	}
	testkit.RequireKernel(t)
	tr := newTracer(t, false)
	if _, err := tr.att.Attach(tr.prog(), fifo, "sample", "zero", nil); !errors.Is(err, procmaps.ErrNotRegular) {
		t.Errorf("attach to a FIFO: %v", err)
	}
}

// A file of another architecture is listed but never attached: its probes
// could not fire here.
func TestAttachRefusesForeignMachine(t *testing.T) {
	testkit.RequireKernel(t)
	if runtime.GOARCH != "amd64" {
		t.Skipf("the foreign fixture is aarch64; this host is %s", runtime.GOARCH)
	}
	tr := newTracer(t, false)
	_, err := tr.att.Attach(tr.prog(), testkit.Fixture("usdt_sample_aarch64"), "sample", "zero", nil)
	if !errors.Is(err, attach.ErrForeignMachine) || !strings.Contains(err.Error(), "aarch64") || !strings.Contains(err.Error(), "x86_64") {
		t.Errorf("%v, want ErrForeignMachine naming both", err)
	}
	if tr.att.SpecsInUse() != 0 {
		t.Error("spec slots held after a refusal")
	}
}
