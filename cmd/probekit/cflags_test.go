package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/probekit/probekit/usdt/bpf"
)

func TestCflags(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "inc")
	code, out, stderr := runCmd("cflags", "-o", dir)
	// Debian's linux-libc-dev keeps asm/ in the multiarch directory.
	if want := "-I" + dir + " -I/usr/include/x86_64-linux-gnu -D__TARGET_ARCH_x86"; code != 0 || strings.TrimSpace(out) != want {
		t.Fatalf("exit %d, out %q, stderr %q; want %q", code, out, stderr, want)
	}
	got, err := os.ReadFile(filepath.Join(dir, "usdt.bpf.h"))
	if err != nil || !bytes.Equal(got, bpf.USDTHeader) {
		t.Fatalf("header: %v", err)
	}
	// Default: a directory per header version in the user cache.
	t.Setenv("PROBEKIT_CACHE_DIR", "") // TestMain's, for the line indexes
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	code, out, _ = runCmd("cflags")
	inc := strings.TrimPrefix(strings.Fields(out)[0], "-I")
	if code != 0 || !strings.Contains(inc, filepath.Join("probekit", "include", headersVersion())) {
		t.Fatalf("default: exit %d, %q", code, out)
	}
	if _, err := os.Stat(filepath.Join(inc, "usdt.bpf.h")); err != nil {
		t.Fatal(err)
	}
	if code, _, _ := runCmd("cflags", "extra"); code != 2 {
		t.Errorf("extra argument: exit %d, want 2", code)
	}
	if code, _, _ := runCmd("cflags", "-target", "mips"); code != 2 {
		t.Errorf("-target mips: exit %d, want 2", code)
	}
}

// TestCflagsClang: a BPF_USDT program builds with clang -target bpf and
// no other flag than what cflags prints (it lacked __TARGET_ARCH_x86,
// which bpf_tracing.h needs).
func TestCflagsClang(t *testing.T) {
	clang, err := exec.LookPath("clang-19")
	if err != nil {
		t.Fatalf("clang-19 (make deps installs it): %v", err)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "prog.bpf.c")
	if err := os.WriteFile(src, []byte(usdtProgram), 0o644); err != nil {
		t.Fatal(err)
	}
	code, flags, stderr := runCmd("cflags", "-o", filepath.Join(dir, "inc"))
	if code != 0 {
		t.Fatalf("cflags: exit %d: %s", code, stderr)
	}
	args := append([]string{"-O2", "-g", "-target", "bpf", "-c", src, "-o", filepath.Join(dir, "prog.o")}, strings.Fields(flags)...)
	if out, err := exec.Command(clang, args...).CombinedOutput(); err != nil {
		t.Fatalf("clang %v: %v\n%s", args, err, out)
	}
}

// usdtProgram is a BPF_USDT program as docs/go.md shows one.
const usdtProgram = `#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include "usdt.bpf.h"

SEC("usdt")
int BPF_USDT(on_entry, void *filename, void *funcname, int lineno)
{
	return bpf_usdt_cookie(ctx) + lineno != 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
`

// TestCflagsBpf2go: the bpf2go line of the documentation (usdt/bpf's
// package doc) builds a BPF_USDT program on this machine, with no other
// flag than what cflags prints.
func TestCflagsBpf2go(t *testing.T) {
	clang, err := exec.LookPath("clang-19")
	if err != nil {
		t.Fatalf("clang-19 (make deps installs it): %v", err)
	}
	dir := t.TempDir()
	bpf2go := filepath.Join(dir, "bpf2go")
	if out, err := exec.Command("go", "build", "-o", bpf2go, "github.com/cilium/ebpf/cmd/bpf2go").CombinedOutput(); err != nil {
		t.Fatalf("build bpf2go: %v\n%s", err, out)
	}
	const src = `#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include "usdt.bpf.h"

SEC("usdt")
int BPF_USDT(on_entry, void *filename, void *funcname, int lineno)
{
	return bpf_usdt_cookie(ctx) + lineno != 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
`
	if err := os.WriteFile(filepath.Join(dir, "tracer.c"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	code, flags, stderr := runCmd("cflags", "-o", filepath.Join(dir, "inc"))
	if code != 0 {
		t.Fatalf("cflags: exit %d: %s", code, stderr)
	}
	args := append([]string{"-cc", clang, "-go-package", "tracer", "-target", "amd64", "tracer", "tracer.c", "--"}, strings.Fields(flags)...)
	cmd := exec.Command(bpf2go, args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("bpf2go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "tracer_x86_bpfel.o")); err != nil {
		t.Fatal(err)
	}
}
