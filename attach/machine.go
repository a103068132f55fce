package attach

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
)

// ErrForeignMachine indicates the file is built for an architecture this host
// cannot run, so a probe in it would never fire. Listing such a file is
// fine; attaching to it is refused.
var ErrForeignMachine = errors.New("built for another architecture than this host's")

type machine struct {
	m  elf.Machine
	bo binary.ByteOrder
}

// hostMachines are, per GOARCH, the ELF machine of the kernel and any
// compat machine it runs natively (x86-64 runs i386, arm64 runs arm).
var hostMachines = map[string][]machine{
	"amd64":   {{elf.EM_X86_64, binary.LittleEndian}, {elf.EM_386, binary.LittleEndian}},
	"386":     {{elf.EM_386, binary.LittleEndian}},
	"arm64":   {{elf.EM_AARCH64, binary.LittleEndian}, {elf.EM_ARM, binary.LittleEndian}},
	"arm":     {{elf.EM_ARM, binary.LittleEndian}},
	"s390x":   {{elf.EM_S390, binary.BigEndian}},
	"riscv64": {{elf.EM_RISCV, binary.LittleEndian}},
	"ppc64":   {{elf.EM_PPC64, binary.BigEndian}},
	"ppc64le": {{elf.EM_PPC64, binary.LittleEndian}},
	"loong64": {{elf.EM_LOONGARCH, binary.LittleEndian}},
}

// CheckMachine fails with ErrForeignMachine, naming both architectures,
// unless a file for machine m with byte order bo runs on this host. name
// is the file as the caller named it.
func CheckMachine(name string, m elf.Machine, bo binary.ByteOrder) error {
	host := hostMachines[runtime.GOARCH]
	for _, h := range host {
		if h.m == m && h.bo == bo {
			return nil
		}
	}
	if len(host) == 0 {
		return nil // a host we know nothing of: let the kernel decide
	}
	return fmt.Errorf("%s is built for %s and this host is %s: %w (it cannot run here, so its probes would never fire)",
		name, MachineName(m, bo), MachineName(host[0].m, host[0].bo), ErrForeignMachine)
}

// MachineName names a machine as uname does, with the byte order
// where EM_PPC64 serves both.
func MachineName(m elf.Machine, bo binary.ByteOrder) string {
	switch m {
	case elf.EM_X86_64:
		return "x86_64"
	case elf.EM_386:
		return "i386"
	case elf.EM_AARCH64:
		return "aarch64"
	case elf.EM_ARM:
		return "arm"
	case elf.EM_S390:
		return "s390x"
	case elf.EM_RISCV:
		return "riscv64"
	case elf.EM_PPC64:
		if bo == binary.LittleEndian {
			return "ppc64le"
		}
		return "ppc64"
	case elf.EM_LOONGARCH:
		return "loongarch64"
	case elf.EM_PPC:
		return "ppc"
	case elf.EM_MIPS:
		return "mips"
	}
	return m.String()
}
