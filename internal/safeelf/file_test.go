package safeelf

import (
	"bytes"
	"debug/elf"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/probekit/probekit/internal/test/testkit"
)

func TestMain(m *testing.M) { os.Exit(testkit.RunWithLeakCheck(m)) }

// TestMatchesDebugELF: on every fixture, the headers agree with debug/elf.
func TestMatchesDebugELF(t *testing.T) {
	for _, name := range []string{"usdt_sample", "usdt_sample_i386", "usdt_sample_s390x", "usdt_sample_ppc64", "usdt_sample_armhf", "goprog", "libusdt_lib.so"} {
		b, err := os.ReadFile(testkit.Fixture(name))
		if err != nil {
			t.Fatal(err)
		}
		f, err := NewFile(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		ef, err := elf.NewFile(bytes.NewReader(b)) // the fixtures are ours: debug/elf is the oracle
		if err != nil {
			t.Fatal(err)
		}
		if f.Class != ef.Class || f.Data != ef.Data || f.Machine != ef.Machine || f.Type != ef.Type {
			t.Errorf("%s: header %v %v %v %v", name, f.Class, f.Data, f.Machine, f.Type)
		}
		if len(f.Progs) != len(ef.Progs) || len(f.Sections) != len(ef.Sections) {
			t.Fatalf("%s: %d progs %d sections, debug/elf %d %d", name, len(f.Progs), len(f.Sections), len(ef.Progs), len(ef.Sections))
		}
		for i, p := range ef.Progs {
			q := f.Progs[i]
			if q.Type != p.Type || q.Flags != p.Flags || q.Off != p.Off || q.Vaddr != p.Vaddr || q.Filesz != p.Filesz || q.Memsz != p.Memsz || q.Align != p.Align {
				t.Errorf("%s: prog %d %+v, debug/elf %+v", name, i, q, p.ProgHeader)
			}
		}
		for i, s := range ef.Sections {
			q := f.Sections[i]
			if q.Name != s.Name || q.Type != s.Type || q.Flags != s.Flags || q.Addr != s.Addr || q.Offset != s.Offset || q.Size != s.Size || q.Addralign != s.Addralign || q.Link != s.Link || q.Info != s.Info || q.Entsize != s.Entsize || q.Index != i {
				t.Errorf("%s: section %d %+v, debug/elf %+v", name, i, q, s.SectionHeader)
			}
		}
		ef.Close()
	}
}

func TestNotELF(t *testing.T) {
	for _, b := range [][]byte{nil, []byte("\x7fEL"), []byte("#!/bin/sh\n"), []byte("\x7fELF\x02\x01")} {
		_, err := NewFile(bytes.NewReader(b))
		var fe *FormatError
		if !errors.As(err, &fe) {
			t.Errorf("%q: %v", b, err)
		}
	}
	if _, err := NewFile(bytes.NewReader([]byte("#!/bin/sh\n"))); !strings.Contains(err.Error(), "not an ELF file") {
		t.Errorf("script: %v", err)
	}
}

func TestReadAtBounds(t *testing.T) {
	b, _ := os.ReadFile(testkit.Fixture("usdt_sample"))
	f, err := NewFile(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.ReadAt(uint64(len(b))-4, 8, 100); err == nil {
		t.Error("read past the end accepted")
	}
	if _, err := f.ReadAt(0, 200, 100); err == nil {
		t.Error("read above the limit accepted")
	}
	if _, err := f.ReadAt(^uint64(0)-2, 8, 100); err == nil {
		t.Error("overflowing range accepted")
	}
	if got, err := f.ReadAt(0, 4, 4); err != nil || string(got) != elf.ELFMAG {
		t.Errorf("%q %v", got, err)
	}
}

func TestRecover(t *testing.T) {
	err := func() (err error) {
		defer Recover(&err)
		var s []int
		_ = s[3]
		return nil
	}()
	if err == nil || !strings.Contains(err.Error(), "panicked") {
		t.Errorf("err = %v", err)
	}
}
