package semaphore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/procmaps"
)

// fixtureSemaphore starts usdt_sample and returns it with the runtime
// address of sample:sema's counter, found with debug/elf (the symbol
// sample_sema_semaphore, through its PT_LOAD) and procmaps.
func fixtureSemaphore(t *testing.T) (*testkit.Process, *procmaps.Process, uint64) {
	t.Helper()
	testkit.RequireKernel(t)
	exe, err := filepath.EvalSymlinks(testkit.Fixture("usdt_sample"))
	if err != nil {
		t.Fatal(err)
	}
	_, off := testkit.SymbolOffset(t, exe, "sample_sema_semaphore")
	fx := testkit.Start(t, exe)
	proc, err := procmaps.Open(fx.PID())
	if err != nil {
		t.Fatal(err)
	}
	id, err := procmaps.IDOf(exe)
	if err != nil {
		t.Fatal(err)
	}
	addr, err := proc.Address(id, off, procmaps.Write)
	if err != nil {
		t.Fatal(err)
	}
	return fx, proc, addr
}

func counter(t *testing.T, pid int, addr uint64) uint16 {
	t.Helper()
	v, err := testkit.ReadUint16(pid, addr)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func setCounter(t *testing.T, pid int, addr uint64, v uint16) {
	t.Helper()
	f, err := os.OpenFile(fmt.Sprintf("/proc/%d/mem", pid), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(binary.NativeEndian.AppendUint16(nil, v), int64(addr)); err != nil {
		t.Fatal(err)
	}
}

// TestCounts: 0 -> 1 -> 2 -> 1 -> 0 in the target's memory, and the
// target sees it (its probe is gated by the counter).
func TestCounts(t *testing.T) {
	fx, proc, addr := fixtureSemaphore(t)
	pid := fx.PID()
	gated := func(want bool) {
		t.Helper()
		if hits := fx.Fire("sema", 1); len(hits) != 1 || hits[0].Skipped != want {
			t.Fatalf("fire sema: %+v, want skipped=%v", hits, want)
		}
	}
	step := func(want uint16) {
		t.Helper()
		if got := counter(t, pid, addr); got != want {
			t.Fatalf("counter %d, want %d", got, want)
		}
		if got := Held(proc, addr); got != int(want) {
			t.Fatalf("Held %d, want %d", got, want)
		}
		gated(want == 0)
	}
	step(0)
	a1, err := Activate(proc, addr)
	if err != nil {
		t.Fatal(err)
	}
	step(1)
	a2, err := Activate(proc, addr)
	if err != nil {
		t.Fatal(err)
	}
	step(2)
	if err := a1.Release(); err != nil {
		t.Fatal(err)
	}
	step(1)
	if err := a1.Release(); err != nil { // idempotent: no second decrement
		t.Fatal(err)
	}
	step(1)
	if err := a2.Release(); err != nil {
		t.Fatal(err)
	}
	step(0)
	if a2.Process() != *proc || a2.Address() != addr {
		t.Fatalf("activation of %v at %#x", a2.Process(), a2.Address())
	}
}

// TestReleaseAfterExit: the target died with the semaphore raised.
func TestReleaseAfterExit(t *testing.T) {
	fx, proc, addr := fixtureSemaphore(t)
	a, err := Activate(proc, addr)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Activate(proc, addr)
	if err != nil {
		t.Fatal(err)
	}
	fx.Kill()
	if err := a.Release(); err != nil {
		t.Fatalf("release after exit: %v", err)
	}
	if err := b.Release(); err != nil {
		t.Fatalf("release after exit: %v", err)
	}
	if n := Held(proc, addr); n != 0 {
		t.Fatalf("still held: %d", n)
	}
	if _, err := Activate(proc, addr); !errors.Is(err, procmaps.ErrProcessGone) || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("activate in an exited process: %v", err)
	}
}

// TestReleaseNeverWritesAnotherProcess: when the identity no longer
// matches, release does not touch the memory at that PID.
func TestReleaseNeverWritesAnotherProcess(t *testing.T) {
	fx, proc, addr := fixtureSemaphore(t)
	a, err := Activate(proc, addr)
	if err != nil {
		t.Fatal(err)
	}
	a.proc.StartTime++ // as if the PID had been reused
	if err := a.Release(); err != nil {
		t.Fatalf("release for a changed process: %v", err)
	}
	if v := counter(t, fx.PID(), addr); v != 1 {
		t.Fatalf("counter %d after a release that must not write, want 1", v)
	}
	setCounter(t, fx.PID(), addr, 0)
	if n := Outstanding(); n != 0 {
		t.Fatalf("outstanding %d", n)
	}
}

func TestActivateRefuses(t *testing.T) {
	fx, proc, addr := fixtureSemaphore(t)
	if _, err := Activate(proc, addr+1); !errors.Is(err, ErrMisaligned) {
		t.Errorf("odd address: %v", err)
	}
	maps, _, err := proc.Mappings()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range maps {
		if m.Perms&procmaps.Exec != 0 && m.Perms&procmaps.Write == 0 {
			if _, err := Activate(proc, m.Start); !errors.Is(err, ErrNotWritable) {
				t.Errorf("address in %v mapping: %v", m.Perms, err)
			}
			break
		}
	}
	if _, err := Activate(proc, 0x10); !errors.Is(err, ErrNotWritable) {
		t.Errorf("unmapped address: %v", err)
	}
	if _, err := Activate(nil, addr); err == nil {
		t.Error("nil process accepted")
	}

	setCounter(t, fx.PID(), addr, 0xffff)
	if _, err := Activate(proc, addr); !errors.Is(err, ErrOverflow) {
		t.Errorf("counter at 65535: %v", err)
	}
	setCounter(t, fx.PID(), addr, 0)

	a, err := Activate(proc, addr)
	if err != nil {
		t.Fatal(err)
	}
	setCounter(t, fx.PID(), addr, 0) // someone else lowered it
	if err := a.Release(); !errors.Is(err, ErrUnbalanced) {
		t.Errorf("release at 0: %v", err)
	}
	if v := counter(t, fx.PID(), addr); v != 0 {
		t.Errorf("counter %d after an unbalanced release, want 0", v)
	}
	if n := Outstanding(); n != 0 {
		t.Errorf("outstanding %d", n)
	}
}

// TestConcurrent: activations from many goroutines, in a caller-owned
// registry, add up exactly.
func TestConcurrent(t *testing.T) {
	fx, proc, addr := fixtureSemaphore(t)
	const goroutines, each = 8, 25
	var reg Registry
	acts := make(chan *Activation, goroutines*each)
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range each {
				a, err := reg.Activate(proc, addr)
				if err != nil {
					t.Error(err)
					return
				}
				acts <- a
			}
		})
	}
	wg.Wait()
	close(acts)
	if v := counter(t, fx.PID(), addr); v != goroutines*each || reg.Outstanding() != goroutines*each {
		t.Fatalf("counter %d, outstanding %d; want %d", v, reg.Outstanding(), goroutines*each)
	}
	for a := range acts {
		wg.Go(func() {
			if err := a.Release(); err != nil {
				t.Error(err)
			}
			a.Release()
		})
	}
	wg.Wait()
	if v := counter(t, fx.PID(), addr); v != 0 || reg.Outstanding() != 0 {
		t.Fatalf("counter %d, outstanding %d after releasing all", v, reg.Outstanding())
	}
}
