package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

// exportBinary is the executable of `probekit export`
// (./cmd/probekit-export). It is not linked into probekit: the Prometheus
// client, protobuf and YAML packages it needs would run their package
// initialisation at every start of every subcommand.
const exportBinary = "probekit-export"

func init() {
	register(&command{
		name:    "export",
		usage:   "export --config FILE [--listen ADDR]",
		summary: "serve Prometheus metrics (/metrics) counted in the kernel at the probes FILE names: counters of hits, histograms of an argument or of the latency between two probes, labels from arguments; SIGHUP reloads FILE, SIGTERM detaches (runs " + exportBinary + ")",
		run:     runExport,
	})
}

// findExporter returns the path of probekit-export: next to probekit's
// own executable, else on PATH.
func findExporter() (string, error) {
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), exportBinary)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	p, err := exec.LookPath(exportBinary)
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("%s not found next to probekit or on PATH: install it with go install github.com/probekit/probekit/cmd/probekit-export@latest (or ./cmd/... in a checkout), or build it with make build", exportBinary)
		}
		return "", err
	}
	return filepath.Abs(p)
}

// runExport replaces probekit with probekit-export, with the same
// arguments: signals (SIGHUP reloads, SIGTERM detaches) reach the exporter
// itself, and its exit status is the command's.
func runExport(args []string, _ io.Writer) error {
	path, err := findExporter()
	if err != nil {
		return err
	}
	argv := append([]string{exportBinary}, args...)
	if err := syscall.Exec(path, argv, os.Environ()); err != nil {
		return fmt.Errorf("exec %s: %w", path, err)
	}
	return nil
}
