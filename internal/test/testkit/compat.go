package testkit

import (
	"errors"
	"os/exec"
	"syscall"
	"testing"
)

// RequireCompatExec skips tb when the kernel refuses to run the fixture
// at path, a program of the host's compat architecture (i386 on x86-64):
// execve fails with ENOEXEC where IA-32 emulation is off (ia32_emulation=0,
// or a hypervisor that runs 64-bit user code only, which says so at boot:
// "IA-32 emulation off"). Nothing can make such a machine run it, so this
// is a skip even under PROBEKIT_REQUIRE_KERNEL=1; a missing loader or any
// other failure still fails.
func RequireCompatExec(tb testing.TB, path string) {
	tb.Helper()
	cmd := exec.Command(path)
	err := cmd.Start()
	if err == nil {
		cmd.Process.Kill()
		cmd.Wait()
		return
	}
	if errors.Is(err, syscall.ENOEXEC) {
		tb.Skipf("this kernel does not run %s (execve: %v): IA-32 emulation is off", path, err)
	}
	tb.Fatalf("start %s: %v", path, err)
}
