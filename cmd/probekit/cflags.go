package main

import (
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/probekit/probekit/usdt/bpf"
)

const cflagsUsage = "cflags [-o DIR]"

func init() {
	register(&command{
		name:  "cflags",
		usage: cflagsUsage,
		summary: "write the BPF-side headers this probekit embeds (usdt.bpf.h) to DIR (default: a directory per header version " +
			"in the user cache) and print the -I flag that finds them, for clang or bpf2go",
		run: runCflags,
	})
}

func runCflags(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("cflags", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	dir := fs.String("o", "", "directory to write the headers to")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return usagef("%v", err)
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q", pos[0])
	}
	if *dir == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			return fmt.Errorf("no user cache directory (give -o DIR): %w", err)
		}
		*dir = filepath.Join(cache, "probekit", "include", headersVersion())
	}
	flag, err := bpf.WriteHeaders(*dir)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(stdout, flag)
	return err
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
