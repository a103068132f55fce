package main

import (
	"bufio"
	"bytes"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/probekit/probekit/internal/test/testkit"
)

// The two counted call paths of stack_chain_nofp (no frame pointers) at
// chain_end and chain_b, folded, as the CFI walk gives them down to
// _start; per round one hit of each.
func chainNoFPFolded(rounds int) []string {
	const base = "_start;__libc_start_main_impl;__libc_start_call_main;main;run;fire;chain_a;chain_b"
	n := " " + itoa(rounds)
	return []string{base + n, base + ";chain_c;chain_end" + n}
}

// --count --stack=cfi counts by stacks unwound inside BPF from CFI: a
// launched stack_chain_nofp, which exits right after its hits, gives its
// two paths whole with their exact counts, libc's frames included
// (libc's tables are loaded at the program's entry point, after the
// dynamic linker mapped it). The kernel's frame-pointer walk (--count
// --stack=fp) of the same hits stops at the first caller.
func TestTraceCountStackCFI(t *testing.T) {
	testkit.RequireKernel(t)
	requireAMD64(t)
	fx := testkit.Fixture("stack_chain_nofp")
	probes := []string{"uprobe:" + fx + ":chain_end", "uprobe:" + fx + ":chain_b"}
	args := append(append([]string{"--count", "--stack=cfi", "--folded"}, probes...), "--", fx, "--loop", "chain", "7")
	r := runTraceCmd(args...)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.errOut)
	}
	got := strings.Split(strings.TrimSpace(r.out), "\n")
	if want := chainNoFPFolded(7); !slices.Equal(got, want) {
		t.Errorf("folded:\n%s\nwant:\n%s", r.out, strings.Join(want, "\n"))
	}
	if r.errOut != "" {
		t.Errorf("warnings: %s", r.errOut)
	}

	// The frame-pointer walk of the same program: chain_end's caller is
	// found (at the function's entry the return address is at the stack
	// pointer), the frames above it are not.
	args = append(append([]string{"--count", "--stack=fp", "--folded"}, probes[0]), "--", fx, "--loop", "chain", "7")
	if r = runTraceCmd(args...); r.code != 0 || strings.Contains(r.out, "main") {
		t.Errorf("frame pointers: exit %d, %q (%s), want a stack short of main", r.code, r.out, r.errOut)
	}
}

// -p with a glob target (follow.WatchProcess): a running
// stack_chain_nofp, its tables read when its probes are attached; its
// USDT probe stack:leaf in chain_c counted by CFI stack, printed once it
// exits.
func TestTraceCountStackCFIPID(t *testing.T) {
	testkit.RequireKernel(t)
	requireAMD64(t)
	out, errOut := countStackGlob(t, "stack_chain_nofp", "--stack=cfi")
	want := "_start;__libc_start_main_impl;__libc_start_call_main;main;run;fire;chain_a;chain_b;chain_c 5\n"
	if out != want {
		t.Errorf("folded %q, want %q", out, want)
	}
	if errOut != "" {
		t.Errorf("stderr: %s", errOut)
	}
}

// -f: the processes of a tree are given to the walk at their exec and
// again at their program's entry point (follow.Options.Hold), so two
// stack_chain_nofp run by a shell are counted whole, libc included.
func TestTraceCountStackCFIFollow(t *testing.T) {
	testkit.RequireKernel(t)
	requireAMD64(t)
	fx := testkit.Fixture("stack_chain_nofp")
	r := runTraceCmd("-f", "--count", "--stack=cfi", "--folded", "uprobe:"+fx+":chain_end", "--",
		"/bin/sh", "-c", fx+" --loop chain 5; "+fx+" --loop chain 2")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.errOut)
	}
	if want := chainNoFPFolded(7)[1] + "\n"; r.out != want {
		t.Errorf("folded %q, want %q", r.out, want)
	}
}

// -p with a library loaded later (dlopen, not seen without -f or a
// glob): its tables join at the next refresh of the walk's tables, after
// which stack_dlopen's stacks through libstack_mid.so (no frame
// pointers) are whole. fire's entry, hit by a round of an unknown
// command (which loads nothing), shows the trace attached first.
func TestTraceCountStackCFIDlopen(t *testing.T) {
	testkit.RequireKernel(t)
	requireAMD64(t)
	fx := testkit.Fixture("stack_dlopen")
	p := testkit.Start(t, fx)
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	var errOut bytes.Buffer
	go func() {
		done <- run([]string{"trace", "--count", "--stack=cfi", "--folded", "-i", "1", "-p", itoa(p.PID()),
			"uprobe:" + fx + ":leaf", "uprobe:" + fx + ":fire"}, pw, &errOut)
		pw.Close()
	}()
	const start = "_start;__libc_start_main_impl;__libc_start_call_main;main;run;fire"
	attached, found := make(chan struct{}), make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pr)
		var a, f bool
		for sc.Scan() {
			switch l := sc.Text(); {
			case !a && strings.HasPrefix(l, start+" "):
				a = true
				close(attached)
			case !f && strings.HasPrefix(l, start+";mid_call;leaf "):
				f = true
				close(found)
			}
		}
	}()
	wait := func(c <-chan struct{}, what, cmd string) {
		t.Helper()
		deadline := time.After(20 * time.Second)
		for {
			select {
			case <-c:
				return
			case <-deadline:
				t.Fatalf("no %s within 20s: %s", what, errOut.String())
			case <-time.After(20 * time.Millisecond):
				p.Loop(cmd, 1)
			}
		}
	}
	wait(attached, "count of fire", "none")
	wait(found, "whole stack through the dlopened library", "dl")
	p.Stop()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
}
