package tracer

import (
	"debug/elf"
	"strings"

	"github.com/probekit/probekit/attach"
	"github.com/probekit/probekit/follow"
	"github.com/probekit/probekit/procmaps"
)

// checkTargetMachines refuses a probe whose target names a file of
// another architecture, as attaching it by path does
// (attach.ErrForeignMachine). A trace that follows processes attaches a
// file only once a process maps it, which such a file's never is: it
// would wait for ever (Linux 5.10 without BPF cookies, where a trace of
// every process is a host watch). A target that is a selector, a
// library name or not a regular ELF file is left to the attach that
// follows.
func checkTargetMachines(cfg *Config) error {
	for _, p := range cfg.Probes {
		if follow.Selector(p.Target) || !strings.Contains(p.Target, "/") {
			continue
		}
		m, err := targetMachine(p.Target)
		if err != nil {
			continue
		}
		if err := attach.CheckMachine(p.Target, m.Machine, m.ByteOrder); err != nil {
			return err
		}
	}
	return nil
}

// targetMachine reads path's ELF header, from a regular file opened
// without blocking (a FIFO named as a target does not hang the trace).
func targetMachine(path string) (elf.FileHeader, error) {
	osf, err := procmaps.OpenFile(path)
	if err != nil {
		return elf.FileHeader{}, err
	}
	defer osf.Close()
	f, err := elf.NewFile(osf)
	if err != nil {
		return elf.FileHeader{}, err
	}
	return f.FileHeader, nil
}
