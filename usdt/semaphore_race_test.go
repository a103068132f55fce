package usdt_test

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/procmaps"
	"github.com/probekit/probekit/usdt"
)

// TestSemaphoreRaiseLostToUserSpaceWriter shows how another tracer
// silences an attached probe. A tracer that raises a semaphore from user
// space (bcc's way, and package semaphore's fallback) reads the counter
// through /proc/PID/mem, then writes it back plus one: when the kernel
// raises the counter for an attach between the two (ref_ctr_offset, as
// the breakpoint goes in), the write-back erases the kernel's raise. Once
// that tracer lowers its count, the counter is 0 while the probe is still
// attached, and the program stops firing it. The steps run here in that
// order, one after the other.
func TestSemaphoreRaiseLostToUserSpaceWriter(t *testing.T) {
	testkit.RequireKernel(t)
	tr := newTracer(t, false)
	// A private copy: the kernel cannot lower a semaphore that is
	// already 0 when the probe detaches, and then keeps the uprobe on
	// the file for good ("ref_ctr going negative ... leaking uprobe"),
	// which would refuse every later attach at that site with a
	// semaphore offset of its own. Only this copy's inode keeps it.
	exe := filepath.Join(t.TempDir(), "usdt_sample")
	testkit.CopyFile(t, testkit.Fixture("usdt_sample"), exe)
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
	mem, err := os.OpenFile("/proc/"+strconv.Itoa(fx.PID())+"/mem", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	read := func() uint16 {
		var b [2]byte
		if _, err := mem.ReadAt(b[:], int64(addr)); err != nil {
			t.Fatal(err)
		}
		return binary.NativeEndian.Uint16(b[:])
	}
	write := func(v uint16) {
		if _, err := mem.WriteAt(binary.NativeEndian.AppendUint16(nil, v), int64(addr)); err != nil {
			t.Fatal(err)
		}
	}

	// The other tracer's raise: it reads 0...
	v := read()
	// ...the kernel raises the counter as this attach goes in...
	l := tr.attach(exe, "sample", "sema", &usdt.Options{PID: fx.PID()})
	if got := read(); got != v+1 {
		t.Fatalf("after attach the counter is %d, want %d", got, v+1)
	}
	// ...and the other tracer writes back what it read plus one.
	write(v + 1)
	// Both hold the probe; the counter says one. It fires:
	if hits := fx.Fire("sema", 1); hits[0].Skipped {
		t.Fatal("sample:sema skipped with both holders")
	}
	if got := tr.hits(1); got[0].ArgVal[0] != 0 {
		t.Fatalf("hit %+v", got[0])
	}
	// The other tracer lowers its count: 0, with the probe attached.
	write(read() - 1)
	if got := read(); got != 0 {
		t.Fatalf("counter %d", got)
	}
	if hits := fx.Fire("sema", 1); !hits[0].Skipped {
		t.Fatal("sample:sema fired with its semaphore at 0")
	}
	tr.hits(0) // none arrives
	sites := l.Sites()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	// The link set the counter back to 1 before it detached, so the
	// kernel lowered it to 0 and removed its uprobe: a uprobe without a
	// semaphore attaches at the same site. Had the kernel kept its
	// uprobe (its decrement finding 0), this attach would fail with
	// EINVAL for good on this inode.
	if got := read(); got != 0 {
		t.Fatalf("after detach the counter is %d, want 0", got)
	}
	if len(sites) != 1 || sites[0].RefCtrOffset == 0 {
		t.Fatalf("sites %+v", sites)
	}
	ex, err := link.OpenExecutable(exe)
	if err != nil {
		t.Fatal(err)
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.Kprobe, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}})
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	bare, err := ex.Uprobe("", prog, &link.UprobeOptions{Address: sites[0].Offset, PID: fx.PID()})
	if err != nil {
		t.Fatalf("a uprobe at the detached site without its semaphore: %v (the kernel kept the old one)", err)
	}
	bare.Close()
}
