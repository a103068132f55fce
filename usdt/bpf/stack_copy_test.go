package bpf_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/procmaps"
	"github.com/probekit/probekit/unwind"
	"github.com/probekit/probekit/uprobe"
	"github.com/probekit/probekit/usdt/bpf"
)

// copyEvent is struct copy_event of stacktest.c: the frame-pointer walk
// and the stack copy of one hit.
type copyEvent struct {
	pid    uint32
	fp     bpf.Stack
	sample unwind.Sample
	copied int64
}

// gdbFrame is a line of gdb's bt: "#N  0xADDR in FUNC ...".
var gdbFrame = regexp.MustCompile(`(?m)^#(\d+)\s+0x([0-9a-f]+) in (\S+)`)

// compareGDB stops p at chain_end's entry under gdb (attached by pid,
// a breakpoint, one round fired) and checks that gdb's bt, which
// unwinds with its own CFI reader and libc6-dbg's debug information,
// gives the same addresses as frames, frame by frame.
func compareGDB(t *testing.T, p *testkit.Process, frames []uint64) {
	t.Helper()
	gdb, err := exec.LookPath("gdb")
	if err != nil {
		testkit.Unavailable(t, "gdb: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, gdb, "-p", strconv.Itoa(p.PID()), "-batch", "-nx",
		"-ex", "set debuginfod enabled off", "-ex", "set backtrace past-main on", "-ex", "break chain_end", "-ex", "continue", "-ex", "bt", "-ex", "detach")
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	cmd.Stdout, cmd.Stderr = pw, pw
	err = cmd.Start()
	pw.Close()
	if err != nil {
		t.Fatal(err)
	}
	// Fire once gdb has set its breakpoint ("Breakpoint 1 at"): the
	// command waits in the fixture's stdin until continue resumes it.
	var out strings.Builder
	hits := make(chan error, 1)
	fired := false
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		out.WriteString(sc.Text() + "\n")
		if !fired && strings.HasPrefix(sc.Text(), "Breakpoint 1 at") {
			fired = true
			go func() { hits <- p.Loop("chain", 1) }()
		}
	}
	werr := cmd.Wait()
	if !fired {
		t.Fatalf("gdb set no breakpoint: %v\n%s", werr, out.String())
	}
	if err := <-hits; err != nil {
		t.Fatal(err)
	}
	m := gdbFrame.FindAllStringSubmatch(out.String(), -1)
	if werr != nil || len(m) == 0 {
		t.Fatalf("gdb: %v\n%s", werr, out.String())
	}
	var got []uint64
	for _, f := range m {
		a, _ := strconv.ParseUint(f[2], 16, 64)
		got = append(got, a)
	}
	t.Logf("gdb bt: %v", m)
	if !slices.Equal(got, frames) {
		t.Errorf("gdb's bt %#x, the CFI unwind %#x", got, frames)
	}
}

func (r *stackRig) copies(t testing.TB, want int) []copyEvent {
	t.Helper()
	var out []copyEvent
	const head = 24 + 8*bpf.MaxStackDepth
	for _, raw := range r.records(t, want, head+40+bpf.StackCopySize) {
		ne := binary.NativeEndian
		fp, err := bpf.DecodeStack(raw[24:], int64(ne.Uint64(raw[8:])))
		if err != nil {
			t.Fatal(err)
		}
		s, err := bpf.DecodeStackCopy(raw[head:])
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, copyEvent{ne.Uint32(raw), fp, s, int64(ne.Uint64(raw[16:]))})
	}
	return out
}

// The -fomit-frame-pointer chain at the entry of chain_end: the copied
// stack unwound with the objects' CFI gives the whole chain down to
// main, then libc's __libc_start_call_main (Debian's libc has
// .eh_frame; the name is a local symbol of libc6-dbg's debug file, which
// the symbolizer does not read yet: the frame is checked to be in libc)
// and __libc_start_main, ending cleanly at _start's undefined return
// address. The
// frame-pointer walk of the same hit stops short: after chain_end and
// its caller (at_entry) rbp holds no frame record. gdb's bt on the
// same process stopped at the same place gives the same addresses.
func TestStackCopyNoFramePointers(t *testing.T) {
	r := newStackRig(t)
	fx := testkit.Fixture("stack_chain_nofp")
	p := testkit.Start(t, fx)
	b, err := uprobe.Open(fx)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	l, err := b.Entry("chain_end", r.coll.Programs["stack_copy"], &uprobe.Options{PID: p.PID()})
	if err != nil {
		t.Fatal(err)
	}
	p.Fire("chain", 2)
	l.Close()
	proc, err := procmaps.Open(p.PID())
	if err != nil {
		t.Fatal(err)
	}
	objs, err := unwind.NewCache().Process(proc)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"chain_end", "chain_c", "chain_b", "chain_a", "fire", "run", "main"}
	for i, ev := range r.copies(t, 2) {
		if ev.copied <= 0 || ev.pid != uint32(p.PID()) { // a stack near its mapping's end gives less than a page
			t.Fatalf("copied %d bytes of pid %d", ev.copied, ev.pid)
		}
		res := ev.sample.Unwind(objs)
		fns, objs := names(t, p.PID(), bpf.Stack(res.Frames))
		t.Logf("CFI: %v in %v (%v, %d by frame pointer)", fns, objs, res.Stop, res.ByFramePointer)
		n := len(want)
		if len(fns) != n+3 || !slices.Equal(fns[:n], want) || objs[n] != "libc.so.6" ||
			(fns[n] != "" && fns[n] != "__libc_start_call_main") ||
			// __libc_start_main_impl with libc6-dbg's symbol table (gdb's
			// name), __libc_start_main from .dynsym without it.
			fns[n+1] != "__libc_start_main" && fns[n+1] != "__libc_start_main_impl" ||
			fns[n+2] != "_start" || res.Stop != unwind.StopOutermost || res.ByFramePointer != 0 {
			t.Errorf("unwound by CFI: %v, stop %v (%v); want %v ... _start, outermost", fns, res.Stop, res.Err, want)
		}
		if i == 0 {
			compareGDB(t, p, res.Frames)
		}
		fpFns, _ := names(t, p.PID(), ev.fp)
		t.Logf("frame pointers: %v", fpFns)
		if len(fpFns) >= len(want) && slices.Equal(fpFns[:len(want)], want) {
			t.Errorf("the frame-pointer walk found the whole chain %v: the fixture keeps frame pointers", fpFns)
		}
		if !slices.Equal(fpFns[:2], want[:2]) {
			t.Errorf("frame-pointer walk %v, want %v first", fpFns, want[:2])
		}
	}
}

// Counting by stack in the kernel, on the frame-pointer chain:
// chain_end probed for 5 rounds, chain_c for the last 2 of them, give
// two distinct stacks with counts 5 and 2, most frequent first, each
// with its caller put back (at_entry).
func TestStackCounts(t *testing.T) {
	r := newStackRig(t)
	fx := testkit.Fixture("stack_chain")
	p := testkit.Start(t, fx)
	b, err := uprobe.Open(fx)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	prog := r.coll.Programs["stack_count"]
	l1, err := b.Entry("chain_end", prog, &uprobe.Options{PID: p.PID()})
	if err != nil {
		t.Fatal(err)
	}
	defer l1.Close()
	p.Fire("chain", 3)
	l2, err := b.Entry("chain_c", prog, &uprobe.Options{PID: p.PID()})
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	p.Fire("chain", 2)
	got, err := bpf.ReadStackCounts(r.coll.Maps["stack_ids"], r.coll.Maps["stack_counts"])
	if err != nil {
		t.Fatal(err)
	}
	chain := []string{"chain_c", "chain_b", "chain_a", "fire", "run", "main"}
	want := []struct {
		fns   []string
		count uint64
	}{{append([]string{"chain_end"}, chain...), 5}, {chain, 2}}
	if len(got) != len(want) {
		t.Fatalf("%d stacks, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		fns, _ := names(t, p.PID(), got[i].Stack)
		if len(fns) < len(w.fns) || !slices.Equal(fns[:len(w.fns)], w.fns) || got[i].Count != w.count || got[i].Sum != w.count || got[i].PID != uint32(p.PID()) {
			t.Errorf("stack %d: %v counted %d (sum %d, pid %d), want %v first, %d", i, fns, got[i].Count, got[i].Sum, got[i].PID, w.fns, w.count)
		}
	}
}
