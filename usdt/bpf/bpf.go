// Package bpf ships probekit's BPF-side C headers as part of the Go
// module: usdt.bpf.h, libbpf's BPF-side USDT API (BPF_USDT, bpf_usdt_arg,
// bpf_usdt_arg_cnt, bpf_usdt_arg_size, bpf_usdt_cookie) over the maps the
// Go side (package usdt) fills, loadable by cilium/ebpf; and stack.bpf.h,
// probekit_user_stack, the user stack of the thread that hit a probe,
// which DecodeStack reads back (see Stack).
//
// A BPF program includes it as <usdt.bpf.h>, with this package's
// directory on the include path. A module that imports probekit finds
// that directory in the module cache, or in its vendor directory (this Go
// file makes `go mod vendor` keep the folder and the embedded header):
//
//	-I$(go list -m -f '{{.Dir}}' github.com/probekit/probekit)/usdt/bpf
//
// Or, without asking the Go tool where the module is, `probekit cflags`
// writes the headers this build of probekit embeds to a directory and
// prints the -I flag for it, so the header always matches the Go side
// that fills its maps:
//
//	//go:generate sh -c "go tool bpf2go -target amd64 tracer tracer.c -- $(go run github.com/probekit/probekit/cmd/probekit cflags)"
//
// The header needs struct pt_regs (vmlinux.h, or <linux/ptrace.h> with
// the target's asm headers) and libbpf's <bpf/bpf_helpers.h> (Debian's
// libbpf-dev) before it.
package bpf

import (
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
)

// USDTHeader is usdt.bpf.h.
//
//go:embed usdt.bpf.h
var USDTHeader []byte

// StackHeader is stack.bpf.h: probekit_user_stack, a thread's user stack
// with the caller kept at a function's entry (see DecodeStack).
//
//go:embed stack.bpf.h
var StackHeader []byte

// UnwindHeader is unwind.bpf.h: probekit_cfi_user_stack, a thread's
// user stack unwound in BPF from call-frame information over the maps
// package bpfunwind fills, and probekit_cfi_count_user_stack,
// stacks counted in the kernel.
//
//go:embed unwind.bpf.h
var UnwindHeader []byte

// PythonHeader is python.bpf.h: probekit_py_user_stack, a thread's
// CPython frames read in BPF over the map package interp/python fills.
//
//go:embed python.bpf.h
var PythonHeader []byte

// FaultStrHeader is faultstr.bpf.h: probekit_read_user_str, a string
// read that faults the string's pages in from a sleepable program.
//
//go:embed faultstr.bpf.h
var FaultStrHeader []byte

// Headers maps each header's file name to its contents.
var Headers = map[string][]byte{
	"usdt.bpf.h":     USDTHeader,
	"stack.bpf.h":    StackHeader,
	"unwind.bpf.h":   UnwindHeader,
	"faultstr.bpf.h": FaultStrHeader,
	"python.bpf.h":   PythonHeader,
}

// WriteHeaders writes Headers into dir, creating it, and returns the
// compiler flag that puts dir on the include path ("-I" + dir). A header
// already there with the same contents is left alone; another is
// replaced atomically (written aside, then renamed), so concurrent builds
// never read half a file.
func WriteHeaders(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return "", err
	}
	for name, data := range Headers {
		path := filepath.Join(abs, name)
		if old, err := os.ReadFile(path); err == nil && string(old) == string(data) {
			continue
		}
		tmp, err := os.CreateTemp(abs, "."+name+".*")
		if err != nil {
			return "", err
		}
		_, werr := tmp.Write(data)
		cerr := tmp.Close()
		if err := firstErr(werr, cerr, os.Chmod(tmp.Name(), 0o644)); err != nil {
			os.Remove(tmp.Name())
			return "", fmt.Errorf("write %s: %w", path, err)
		}
		if err := os.Rename(tmp.Name(), path); err != nil {
			os.Remove(tmp.Name())
			return "", err
		}
	}
	return "-I" + abs, nil
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
