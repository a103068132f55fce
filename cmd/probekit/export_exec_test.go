package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// buildExporter builds probekit-export (./cmd/probekit-export) once per
// test binary, without cgo as make build builds it (a cgo build cannot
// change every thread's capabilities: TestExportAsNobody), into a
// directory every user may enter, and returns the directory. A build
// took 20 s to 5 minutes under the kernel matrix's emulation; TestMain
// removes the directory at the end (removeBuilt).
func buildExporter(t *testing.T) string {
	t.Helper()
	exporterBuild.once.Do(func() {
		dir, err := os.MkdirTemp("", "probekit-export-")
		if err == nil {
			err = os.Chmod(dir, 0o755)
		}
		if err != nil {
			exporterBuild.err = err
			return
		}
		exporterBuild.dir = dir
		bin := filepath.Join(dir, exportBinary)
		if built := os.Getenv(exporterBinaryEnv); built != "" {
			exporterBuild.err = copyExecutable(built, bin)
			return
		}
		build := exec.Command("go", "build", "-o", bin, "../probekit-export")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			exporterBuild.err = fmt.Errorf("go build %s: %v\n%s", exportBinary, err, out)
		}
	})
	if exporterBuild.err != nil {
		t.Fatal(exporterBuild.err)
	}
	return exporterBuild.dir
}

// exporterBinaryEnv names a probekit-export built from this tree that
// buildExporter copies instead of building one: the kernel matrix's
// runner (internal/test/tools/vmrun) builds it on the host.
const exporterBinaryEnv = "PROBEKIT_TEST_EXPORTER"

// copyExecutable copies the file src to a new executable dst.
func copyExecutable(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

var exporterBuild struct {
	once sync.Once
	dir  string
	err  error
}

// removeBuilt removes what buildExporter built.
func removeBuilt() {
	if exporterBuild.dir != "" {
		os.RemoveAll(exporterBuild.dir)
	}
}

// exportHelperCommand is `probekit export ARGS` (TestExportHelperProcess)
// finding probekit-export on a PATH that starts with dir.
func exportHelperCommand(dir string, args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^TestExportHelperProcess$")
	cmd.Env = append(os.Environ(),
		exportHelperEnv+"="+strings.Join(args, "\n"),
		"PATH="+dir+string(filepath.ListSeparator)+os.Getenv("PATH"))
	return cmd
}

// runExportProcess runs `probekit export ARGS` to its end and returns its
// exit status and standard error.
func runExportProcess(t *testing.T, dir string, args ...string) (int, string) {
	t.Helper()
	var stderr strings.Builder
	cmd := exportHelperCommand(dir, args...)
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), stderr.String()
}

// TestExportExec: `probekit export` runs probekit-export with its
// arguments; the exporter's messages and exit status are the command's.
func TestExportExec(t *testing.T) {
	dir := buildExporter(t)
	code, stderr := runExportProcess(t, dir, "--no-such-flag")
	if code != 2 || !strings.Contains(stderr, "probekit export: flag provided but not defined: -no-such-flag\nusage: probekit export --config FILE") {
		t.Errorf("exit %d, %q; want exit 2 and the flag error with the usage", code, stderr)
	}
	if code, stderr := runExportProcess(t, dir, "-h"); code != 0 || stderr != "" {
		t.Errorf("-h: exit %d, %q; want exit 0 and nothing", code, stderr)
	}
}

// TestExportMissing: without probekit-export next to probekit or on PATH,
// the command says so and how to build it.
func TestExportMissing(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	var out, errOut strings.Builder
	code := run([]string{"export", "--config", "x.yaml"}, &out, &errOut)
	const want = "probekit export: probekit-export not found next to probekit or on PATH: install it with go install github.com/probekit/probekit/cmd/probekit-export@latest (or ./cmd/... in a checkout), or build it with make build\n"
	if code != 1 || errOut.String() != want {
		t.Errorf("exit %d, %q; want exit 1 and %q", code, errOut.String(), want)
	}
}

// TestExportNotLinked: probekit does not link the exporter's packages,
// whose package initialisation every subcommand would pay at start.
func TestExportNotLinked(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, bad := range []string{
			"github.com/prometheus/client_golang/",
			"github.com/prometheus/client_model/",
			"github.com/prometheus/common/",
			"google.golang.org/protobuf/",
			"go.yaml.in/yaml/",
			"github.com/probekit/probekit/exporter",
		} {
			if strings.HasPrefix(pkg+"/", bad) {
				t.Errorf("probekit links %s", pkg)
			}
		}
	}
}
