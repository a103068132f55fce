package exporter_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLibraryDeps: the library packages below the exporter carry neither
// the Prometheus client (client_golang, client_model, common) nor a YAML
// parser; only exporter and its command do.
func TestLibraryDeps(t *testing.T) {
	pkgs := []string{"usdt", "uprobe", "follow", "symbolize", "attach", "record", "probe", "tracer", "unwind", "profile", "debuginfo"}
	args := []string{"list", "-deps"}
	for _, p := range pkgs {
		args = append(args, "github.com/probekit/probekit/"+p)
	}
	out, err := exec.Command("go", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < len(pkgs) {
		t.Fatalf("go list -deps listed %d packages", len(deps))
	}
	for _, d := range deps {
		// github.com/prometheus/procfs is a /proc parser (procmaps reads
		// /proc/PID/stat with it), not the Prometheus client.
		if strings.HasPrefix(d, "github.com/prometheus/") && !strings.HasPrefix(d, "github.com/prometheus/procfs") ||
			strings.Contains(strings.ToLower(d), "yaml") {
			t.Errorf("a library package depends on %s", d)
		}
	}
	// The check sees what it looks for: the exporter has both.
	out, err = exec.Command("go", "list", "-deps", "github.com/probekit/probekit/exporter").CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	if s := string(out); !strings.Contains(s, "prometheus/client_golang") || !strings.Contains(s, "yaml") {
		t.Errorf("exporter's deps lack prometheus or yaml:\n%s", s)
	}
}
