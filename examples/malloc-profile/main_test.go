package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/probekit/probekit/internal/test/testkit"
)

func TestMain(m *testing.M) { os.Exit(testkit.RunWithLeakCheck(m)) }

// The malloc_user fixture (-O2, no frame pointers) allocates 50 blocks
// of 777 bytes from alloc_round while the profile counts: one sample has
// exactly those 50 calls and 38,850 bytes, innermost malloc
// (__libc_malloc), then its caller alloc_round and, unwound by CFI
// (x86-64), main and libc's start down to _start.
func TestProfile(t *testing.T) {
	testkit.RequireKernel(t)
	cmd := exec.Command(testkit.Fixture("malloc_user"))
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outp, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer in.Close()
	lines := bufio.NewScanner(outp)
	if !lines.Scan() || !strings.HasPrefix(lines.Text(), "ready") {
		t.Fatalf("fixture: %q", lines.Text())
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	attached := make(chan struct{})
	go func() {
		select {
		case <-attached:
		case <-time.After(10 * time.Second):
			cancel()
			done <- fmt.Errorf("not attached within 10s")
			return
		}
		fmt.Fprintln(in, "malloc 777 50")
		for lines.Scan() {
			if lines.Text() == "done" {
				break
			}
		}
		cancel()
		done <- lines.Err()
	}()
	p, err := run(ctx, cmd.Process.Pid, func() { close(attached) })
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, s := range p.Sample {
		var fns []string
		for _, l := range s.Location {
			for _, ln := range l.Line {
				fns = append(fns, ln.Function.Name)
			}
		}
		if s.Value[0] == 50 && s.Value[1] == 50*777 {
			found = fns
		}
	}
	// malloc, __libc_malloc and __GI___libc_malloc are one address in
	// Debian's libc: any of its names (with libc6-dbg's symbol table the
	// symbolizer names it as addr2line does, __GI___libc_malloc).
	if len(found) < 2 || !slices.Contains([]string{"malloc", "__libc_malloc", "__GI___libc_malloc"}, found[0]) || found[1] != "alloc_round" {
		t.Fatalf("no sample of 50 calls and %d bytes from malloc in alloc_round: %v", 50*777, found)
	}
	if cfi {
		want := []string{"alloc_round", "main", "__libc_start_call_main", "__libc_start_main_impl", "_start"}
		if !slices.Equal(found[1:], want) {
			t.Errorf("stack %v, want malloc then %v", found, want)
		}
	}
}
