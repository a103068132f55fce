package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"

	"github.com/probekit/probekit/internal/cachedir"
	"github.com/probekit/probekit/usdt/bpf"
)

const cflagsUsage = "cflags [-o DIR] [-target amd64|arm64]"

func init() {
	register(&command{
		name:  "cflags",
		usage: cflagsUsage,
		summary: "write the BPF-side headers this probekit embeds (usdt.bpf.h) to DIR (default: a directory per header version " +
			"in the probekit cache, or a new temporary directory for a user without one) and print the -I flags a BPF build needs: the headers' directory, and the target's uapi asm/ " +
			"directory where the distribution keeps it apart (Debian's multiarch /usr/include/x86_64-linux-gnu), for clang or bpf2go",
		runIO: runCflags,
	})
}

func runCflags(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("cflags")
	dir := fs.String("o", "", "write the headers to `DIR`")
	target := fs.String("target", runtime.GOARCH, "the BPF program's `TARGET`, as bpf2go names it: amd64 or arm64")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return usagef("%v", err)
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q", pos[0])
	}
	if *dir == "" {
		if cache := cachedir.Dir(); cache != "" {
			*dir = filepath.Join(cache, "include", headersVersion())
		} else {
			// A user without a home (nobody, a DynamicUser service):
			// a directory of its own, which the build that follows reads.
			tmp, err := os.MkdirTemp("", "probekit-include-")
			if err != nil {
				return fmt.Errorf("%s, and no temporary directory (give -o DIR): %w", cachedir.None, err)
			}
			*dir = tmp
			fmt.Fprintf(stderr, "probekit cflags: %s: headers written to %s, which nothing removes (give -o DIR to choose)\n", cachedir.None, tmp)
		}
	}
	tuple, ok := multiarch[*target]
	if !ok {
		return usagef("-target %q: want amd64 or arm64", *target)
	}
	flag, err := bpf.WriteHeaders(*dir)
	if err != nil {
		return err
	}
	if asm := asmDir(tuple); asm != "" {
		flag += " -I" + asm
	}
	// usdt.bpf.h reads registers through bpf_tracing.h, which needs the
	// target named; bpf2go's -target defines the same.
	flag += " -D__TARGET_ARCH_" + targetArch[*target]
	_, err = fmt.Fprintln(stdout, flag)
	return err
}

// targetArch is the __TARGET_ARCH_ suffix of each target, as
// bpf_tracing.h spells it.
var targetArch = map[string]string{
	"amd64": "x86",
	"arm64": "arm64",
}

// multiarch is the GNU triplet of each target: Debian and Ubuntu keep the
// kernel's uapi asm/ headers (asm/types.h, which <linux/types.h> includes)
// under /usr/include/TRIPLET, which clang -target bpf does not search.
var multiarch = map[string]string{
	"amd64": "x86_64-linux-gnu",
	"arm64": "aarch64-linux-gnu",
}

// asmDir is the directory holding TRIPLET's asm/types.h: the native
// multiarch directory, or a cross toolchain's (libc6-dev-arm64-cross);
// "" where asm/ sits in /usr/include itself (Fedora, Arch) or nowhere.
func asmDir(tuple string) string {
	for _, d := range []string{"/usr/include/" + tuple, "/usr/" + tuple + "/include"} {
		if _, err := os.Stat(filepath.Join(d, "asm", "types.h")); err == nil {
			return d
		}
	}
	return ""
}

// headersVersion names the embedded headers by their contents, so that two
// probekit builds with different headers never share a directory.
func headersVersion() string {
	h := sha256.New()
	names := make([]string, 0, len(bpf.Headers))
	for n := range bpf.Headers {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		fmt.Fprintf(h, "%s\x00%d\x00", n, len(bpf.Headers[n]))
		h.Write(bpf.Headers[n])
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}
