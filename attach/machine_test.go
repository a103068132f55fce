package attach_test

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/probekit/probekit/attach"
)

func TestCheckMachine(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skipf("cases written for an x86-64 host, this is %s", runtime.GOARCH)
	}
	for _, c := range []struct {
		m    elf.Machine
		bo   binary.ByteOrder
		ok   bool
		name string
	}{
		{elf.EM_X86_64, binary.LittleEndian, true, ""},
		{elf.EM_386, binary.LittleEndian, true, ""},
		{elf.EM_AARCH64, binary.LittleEndian, false, "aarch64"},
		{elf.EM_PPC64, binary.BigEndian, false, "ppc64"},
		{elf.EM_PPC64, binary.LittleEndian, false, "ppc64le"},
		{elf.EM_X86_64, binary.BigEndian, false, "x86_64"},
	} {
		err := attach.CheckMachine("f", c.m, c.bo)
		if c.ok != (err == nil) {
			t.Errorf("%v %v: %v", c.m, c.bo, err)
			continue
		}
		if !c.ok && (!errors.Is(err, attach.ErrForeignMachine) || !strings.Contains(err.Error(), "built for "+c.name+" and this host is x86_64")) {
			t.Errorf("%v %v: %v, want both architectures named", c.m, c.bo, err)
		}
	}
}
