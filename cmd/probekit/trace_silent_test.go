package main

import (
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/procmaps"
)

// traceUntilInterrupted runs probekit trace with args while during runs
// (given the semaphore's address) once the trace has raised the counter
// at addr in pid, then interrupts it as Ctrl-C would, and returns what it
// wrote to its standard error and os.Stderr.
func traceUntilInterrupted(t *testing.T, pid int, addr uint64, during func(), args ...string) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stderr
	os.Stderr = w
	read := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		read <- string(b)
	}()
	done := make(chan traceResult, 1)
	go func() { done <- runTraceCmd(args...) }()
	finish := func() (traceResult, string) {
		res := <-done
		os.Stderr = saved
		w.Close()
		errOut := <-read
		r.Close()
		return res, errOut
	}
	// Attached once the kernel raised the semaphore.
	deadline := time.Now().Add(30 * time.Second)
	for {
		v, err := testkit.ReadUint16(pid, addr)
		if err != nil {
			t.Fatal(err)
		}
		if v == 1 {
			break
		}
		if time.Now().After(deadline) {
			syscall.Kill(os.Getpid(), syscall.SIGINT)
			res, errOut := finish()
			t.Fatalf("the semaphore is %d 30s after the trace started: %+v %s", v, res, errOut)
		}
		time.Sleep(5 * time.Millisecond)
	}
	during()
	// The trace installs its SIGINT handler right after attaching.
	time.Sleep(300 * time.Millisecond)
	syscall.Kill(os.Getpid(), syscall.SIGINT)
	res, errOut := finish()
	if res.code != 0 {
		t.Fatalf("probekit trace %q: exit %d: %s%s", args, res.code, res.errOut, errOut)
	}
	return res.errOut + errOut
}

// TestTraceSilentLoweredSemaphore: a probe whose semaphore another writer
// set back to 0 while the trace was attached (what a tracer that raises
// semaphores through /proc/PID/mem does when its read-modify-write races
// the kernel's update) stays silent, and the trace says that another
// tracer lowered it; with the semaphore left alone, no such line.
func TestTraceSilentLoweredSemaphore(t *testing.T) {
	testkit.RequireKernel(t)
	// A private copy: the kernel cannot lower a semaphore that is
	// already 0 when the probe detaches, and then keeps the uprobe on
	// the file for good ("ref_ctr going negative ... leaking uprobe"),
	// which would refuse every later attach at that site with a
	// semaphore offset of its own. Only this copy's inode keeps it.
	exe := filepath.Join(t.TempDir(), "usdt_sample")
	testkit.CopyFile(t, testkit.Fixture("usdt_sample"), exe)
	_, off := testkit.SymbolOffset(t, exe, "sample_sema_semaphore")
	id, err := procmaps.IDOf(exe)
	if err != nil {
		t.Fatal(err)
	}
	start := func() (*testkit.Process, uint64) {
		fx := testkit.Start(t, exe)
		proc, err := procmaps.Open(fx.PID())
		if err != nil {
			t.Fatal(err)
		}
		addr, err := proc.Address(id, off, procmaps.Write)
		if err != nil {
			t.Fatal(err)
		}
		return fx, addr
	}
	const want = "sample:sema saw no hit: its semaphore in pid "

	fx, addr := start()
	errOut := traceUntilInterrupted(t, fx.PID(), addr, func() {
		mem, err := os.OpenFile("/proc/"+itoa(fx.PID())+"/mem", os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, err = mem.WriteAt(binary.NativeEndian.AppendUint16(nil, 0), int64(addr))
		mem.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range fx.Fire("sema", 3) {
			if !h.Skipped {
				t.Errorf("the fixture fired sample:sema with its semaphore at 0: %+v", h)
			}
		}
	}, "-p", itoa(fx.PID()), exe+":sample:sema")
	if !strings.Contains(errOut, want+itoa(fx.PID())+" is 0") || !strings.Contains(errOut, "another tracer lowered it") {
		t.Fatalf("stderr %q, want the lowered semaphore named", errOut)
	}
	t.Log(strings.TrimSpace(errOut))

	fx, addr = start()
	errOut = traceUntilInterrupted(t, fx.PID(), addr, func() {}, "-p", itoa(fx.PID()), exe+":sample:sema")
	if strings.Contains(errOut, want) {
		t.Fatalf("semaphore left raised: stderr %q", errOut)
	}
}
