package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// libDirs are searched for a TARGET given as a bare library name
// ("libc.so.6"), after the directories of /etc/ld.so.conf.d: the
// dynamic linker's trusted directories, multiarch first as Debian lays
// them out.
var libDirs = []string{
	"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu",
	"/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
	"/lib64", "/usr/lib64", "/lib", "/usr/lib", "/usr/local/lib",
}

// resolveTarget turns a TARGET argument into a path: a path as given when
// it names a file (or contains a '/'), else a program found on PATH, else
// a library in the usual library directories.
func resolveTarget(target string) (string, error) {
	if strings.ContainsRune(target, '/') {
		return target, nil
	}
	if st, err := os.Stat(target); err == nil && st.Mode().IsRegular() {
		return target, nil
	}
	if p := lookPathELF(target); p != "" {
		return p, nil
	}
	for _, dir := range append(ldConfDirs(), libDirs...) {
		p := filepath.Join(dir, target)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: %w: not a file, not on PATH, not in the library directories (give a path)", target, os.ErrNotExist)
}

// lookPathELF finds name on PATH, preferring the first ELF file: a
// wrapper script or version-manager shim (pyenv's python3.11) has no
// probes, the binary further down PATH does. Without an ELF candidate it
// returns the first match, whose error then says it is not ELF.
func lookPathELF(name string) string {
	first := ""
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		if dir == "" {
			continue
		}
		p, err := exec.LookPath(filepath.Join(dir, name))
		if err != nil {
			continue
		}
		if isELF(p) {
			return p
		}
		if first == "" {
			first = p
		}
	}
	return first
}

func isELF(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var magic [4]byte
	_, err = io.ReadFull(f, magic[:])
	return err == nil && string(magic[:]) == "\x7fELF"
}

// ldConfDirs returns the directories listed in /etc/ld.so.conf.d/*.conf
// (include lines are not followed).
func ldConfDirs() []string {
	confs, _ := filepath.Glob("/etc/ld.so.conf.d/*.conf")
	var dirs []string
	for _, c := range confs {
		f, err := os.Open(c)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if strings.HasPrefix(line, "/") {
				dirs = append(dirs, line)
			}
		}
		f.Close()
	}
	return dirs
}
