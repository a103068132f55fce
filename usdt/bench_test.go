package usdt

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"testing"
)

// libjvmLike builds a file shaped like OpenJDK's libjvm.so: 531 notes of
// one provider, 517 names, libjvm's kind of argument strings.
func libjvmLike() []byte {
	specs := []string{
		"8@%r15 8@%rax -4@%edx 8@%rcx -4@%esi",
		"-4@%eax 8@%r13 -4@%r12d 8@%rbx 8@%r14 8@%r15 8@%rdx 8@%rsi 8@%rdi",
		"8@%rbx 1@%r15b -2@%r15w",
		"",
	}
	notes := make([]testNote, 531)
	for i := range notes {
		notes[i] = testNote{
			location: testTextAddr + uint64(i%16),
			base:     0,
			provider: "hotspot",
			name:     fmt.Sprintf("probe__%03d", i%517),
			args:     specs[i%len(specs)],
		}
	}
	bo := binary.LittleEndian
	return buildELF(elf.ELFCLASS64, bo, elf.EM_X86_64, nops16, encodeNotes(elf.ELFCLASS64, bo, notes))
}

func BenchmarkParseNotes(b *testing.B) {
	file := libjvmLike()
	b.ReportAllocs()
	b.SetBytes(int64(len(file)))
	for b.Loop() {
		if _, err := Parse(bytes.NewReader(file)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOpenLibjvm opens the real libjvm.so (531 notes) from disk.
func BenchmarkOpenLibjvm(b *testing.B) {
	const path = "/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so"
	if _, err := os.Stat(path); err != nil {
		b.Skip("openjdk-17-jre-headless not installed")
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Open(path); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCacheOpen(b *testing.B) {
	c := NewCache()
	path := "../testdata/bin/usdt_sample"
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Open(path); err != nil {
			b.Fatal(err)
		}
	}
}
