package bpf

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestEmbeddedHeaderIsTheSource(t *testing.T) {
	src, err := os.ReadFile("usdt.bpf.h")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(src, USDTHeader) || !bytes.Contains(USDTHeader, []byte("bpf_usdt_arg")) {
		t.Fatal("embedded usdt.bpf.h differs from the file")
	}
}

func TestWriteHeaders(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "inc")
	flag, err := WriteHeaders(dir)
	if err != nil {
		t.Fatal(err)
	}
	if flag != "-I"+dir {
		t.Errorf("flag %q, want -I%s", flag, dir)
	}
	got, err := os.ReadFile(filepath.Join(dir, "usdt.bpf.h"))
	if err != nil || !bytes.Equal(got, USDTHeader) {
		t.Fatalf("written header: %v", err)
	}
	// A stale copy is replaced; nothing else is left in the directory.
	if err := os.WriteFile(filepath.Join(dir, "usdt.bpf.h"), []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := WriteHeaders(dir); err != nil {
		t.Fatal(err)
	}
	got, _ = os.ReadFile(filepath.Join(dir, "usdt.bpf.h"))
	ents, _ := os.ReadDir(dir)
	if !bytes.Equal(got, USDTHeader) || len(ents) != len(Headers) {
		t.Errorf("after rewrite: %d entries, header equal %v", len(ents), bytes.Equal(got, USDTHeader))
	}
}

// A BPF program compiles against the written headers with the flag alone
// (clang-19 and libbpf-dev come with make deps).
func TestHeaderCompiles(t *testing.T) {
	clang, err := exec.LookPath("clang-19")
	if err != nil {
		t.Skip("clang-19 not installed (make deps installs it)")
	}
	dir := t.TempDir()
	flag, err := WriteHeaders(filepath.Join(dir, "inc"))
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(dir, "p.c")
	prog := `#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include <usdt.bpf.h>
#include <stack.bpf.h>
char LICENSE[] SEC("license") = "GPL";
SEC("usdt")
int BPF_USDT(handler, long a) { return a > 0; }
__u64 frames[PROBEKIT_STACK_MAX_DEPTH];
SEC("uprobe")
int entry(struct pt_regs *ctx) { return probekit_user_stack(ctx, frames, sizeof(frames), 1) > 0; }
`
	if err := os.WriteFile(src, []byte(prog), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(clang, "-target", "bpf", "-O2", "-g", "-D__TARGET_ARCH_x86",
		"-I/usr/include/x86_64-linux-gnu", flag, "-c", src, "-o", filepath.Join(dir, "p.o")).CombinedOutput()
	if err != nil {
		t.Fatalf("clang %s: %v\n%s", strings.Join([]string{flag}, " "), err, out)
	}
}
