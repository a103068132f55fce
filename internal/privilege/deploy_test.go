package privilege

import (
	"bufio"
	"os"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

const deployDir = "../../examples/deploy/"

// exportCaps are the capabilities the table names for probekit export
// on a kernel at a kernel.perf_event_paranoid, with RLIMIT_MEMLOCK unlimited (the unit's LimitMEMLOCK=,
// or a kernel that does not charge it).
func exportCaps(t *testing.T, kernel Version, paranoid int) []Cap {
	t.Helper()
	for _, u := range Uses {
		if u.Command == "probekit export" {
			m := &machine{kernel: kernel, memlockUnlimited: true, yama: -1, paranoid: paranoid}
			return m.required(u.Works).Caps()
		}
	}
	t.Fatal("no probekit export in Uses")
	return nil
}

// TestDeploySystemd: the unit's capability lists are the table's for
// the exporter on 5.8 and later, its comment names those before 5.8,
// and it sets what makes them enough (LimitMEMLOCK=infinity) and no
// more (NoNewPrivileges=, a bounding set).
func TestDeploySystemd(t *testing.T) {
	b, err := os.ReadFile(deployDir + "probekit-export.service")
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		line := sc.Text()
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			settings[k] = v
		}
	}
	want := systemdList(exportCaps(t, linux58, 2))
	for _, k := range []string{"AmbientCapabilities", "CapabilityBoundingSet"} {
		if got := settings[k]; !sameNames(got, want) {
			t.Errorf("%s=%s, want the table's %s", k, got, want)
		}
	}
	for k, v := range map[string]string{"LimitMEMLOCK": "infinity", "NoNewPrivileges": "yes", "DynamicUser": "yes", "CacheDirectory": "probekit", "ProtectSystem": "strict"} {
		if settings[k] != v {
			t.Errorf("%s=%q, want %q", k, settings[k], v)
		}
	}
	if _, ok := settings["PrivateUsers"]; ok {
		t.Error("PrivateUsers=: capabilities in the service's own user namespace do not count for BPF")
	}
	old := systemdList(exportCaps(t, Version{5, 4}, 2))
	if debian := systemdList(exportCaps(t, Version{6, 1}, 3)); debian != old {
		t.Fatalf("before 5.8 %s, on Debian's 6.1 %s", old, debian)
	}
	if !strings.Contains(string(b), "replace the capability lists with "+old) {
		t.Errorf("the unit does not say the capabilities before 5.8 and on Debian's level 3: %s", old)
	}
}

// TestDeployKubernetes: the DaemonSet drops every capability and adds
// the table's for the exporter, on a read-only root filesystem.
func TestDeployKubernetes(t *testing.T) {
	b, err := os.ReadFile(deployDir + "daemonset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var ds struct {
		Kind string
		Spec struct {
			Template struct {
				Spec struct {
					HostPID    bool `yaml:"hostPID"`
					Containers []struct {
						SecurityContext struct {
							ReadOnlyRootFilesystem   bool `yaml:"readOnlyRootFilesystem"`
							AllowPrivilegeEscalation bool `yaml:"allowPrivilegeEscalation"`
							Privileged               bool
							Capabilities             struct{ Add, Drop []string }
						} `yaml:"securityContext"`
					}
				}
			}
		}
	}
	if err := yaml.Unmarshal(b, &ds); err != nil {
		t.Fatal(err)
	}
	cs := ds.Spec.Template.Spec.Containers
	if ds.Kind != "DaemonSet" || len(cs) != 1 || !ds.Spec.Template.Spec.HostPID {
		t.Fatalf("kind %q, %d containers, hostPID %v", ds.Kind, len(cs), ds.Spec.Template.Spec.HostPID)
	}
	sc := cs[0].SecurityContext
	if want := kubernetesList(exportCaps(t, linux58, 2)); !sameNames(strings.Join(sc.Capabilities.Add, ", "), want) {
		t.Errorf("capabilities.add %v, want the table's [%s]", sc.Capabilities.Add, want)
	}
	if !slices.Equal(sc.Capabilities.Drop, []string{"ALL"}) || !sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation || sc.Privileged {
		t.Errorf("securityContext %+v: want drop [ALL], a read-only root, no escalation, not privileged", sc)
	}
	old := kubernetesList(exportCaps(t, Version{5, 4}, 2))
	if !strings.Contains(string(b), "add: ["+old+"]") {
		t.Errorf("the DaemonSet does not say the capabilities before 5.8 and on Debian's level 3: [%s]", old)
	}
}

// sameNames reports whether two lists of names (separated by spaces or
// commas) hold the same names.
func sameNames(a, b string) bool {
	split := func(s string) []string {
		f := strings.FieldsFunc(s, func(r rune) bool { return r == ' ' || r == ',' })
		slices.Sort(f)
		return f
	}
	return slices.Equal(split(a), split(b))
}
