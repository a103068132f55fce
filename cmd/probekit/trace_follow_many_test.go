package main

import (
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/probekit/probekit/internal/features"
	"github.com/probekit/probekit/internal/test/testkit"
)

// followMany is how many processes the fixture keeps alive at once: far
// more than usdt.bpf.h's default 256 spec slots and 1,024 IP entries.
// With -short (the VM matrix, where emulation makes each attach about
// twenty times slower), 300: still more than the spec slots.
func followMany() int {
	if testing.Short() {
		return 300
	}
	return 2000
}

// traceFollowMany runs trace -f --count on follow_fork's probe with
// followMany children alive at once, each firing it once, and checks
// that every hit was counted.
func traceFollowMany(t *testing.T) {
	t.Helper()
	fx := testkit.Fixture("follow_fork")
	followMany := followMany()
	start := time.Now()
	r := runTraceCmd("--json", "-f", "--count", fx+":follow:hit", "--", fx, strconv.Itoa(followMany), "1")
	t.Logf("%d processes traced in %v", followMany, time.Since(start).Round(time.Millisecond))
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.errOut)
	}
	// Attach and detach notifications, then the count.
	var counts []countLine
	attached := map[int]bool{}
	for _, line := range strings.Split(strings.TrimSpace(r.out), "\n") {
		var v struct {
			Kind string `json:"kind"`
			PID  int    `json:"pid"`
			countLine
		}
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		switch v.Kind {
		case "attach":
			attached[v.PID] = true
		case "":
			counts = append(counts, v.countLine)
		}
	}
	// The parent and every child.
	if len(attached) != followMany+1 {
		t.Errorf("%d processes attached, want %d", len(attached), followMany+1)
	}
	if len(counts) != 1 || !strings.HasSuffix(counts[0].Probe, "follow:hit") || counts[0].Count != uint64(followMany) {
		t.Fatalf("counts %+v, want follow:hit %d", counts, followMany)
	}
}

// TestTraceFollowManyProcesses: trace -f counts every hit of 2,000 live
// processes (it traced at most 256: each took its own spec slots).
func TestTraceFollowManyProcesses(t *testing.T) {
	testkit.RequireKernel(t)
	traceFollowMany(t)
}

// TestTraceFollowManyProcessesNoCookie: the same on the path of kernels
// without BPF cookies, where the specs are found through the IP map
// (forked children share their parent's addresses, and so its entries).
func TestTraceFollowManyProcessesNoCookie(t *testing.T) {
	testkit.RequireKernel(t)
	defer features.ForceOff(features.Cookie)()
	traceFollowMany(t)
}

// TestTraceManySites: a trace with more sites than usdt.bpf.h's default
// 256 spec slots (libjvm's hotspot and hotspot_jni providers, 529
// locations, each a spec of its own) attaches: the command sizes the
// specs map. The VM's lifecycle probes fire once.
func TestTraceManySites(t *testing.T) {
	testkit.RequireKernel(t)
	const (
		java   = "/usr/lib/jvm/java-17-openjdk-amd64/bin/java"
		libjvm = "/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so"
	)
	if _, err := os.Stat(libjvm); err != nil {
		testkit.Unavailable(t, "openjdk-17-jre-headless: %v", err)
	}
	lines := aggregateJSON[countLine](t, append(launchedLibrary(t), "--count", libjvm+":hotspot*:*", "--", java, "-version")...)
	if len(lines) <= 256 {
		t.Fatalf("%d probes counted, want more than 256", len(lines))
	}
	count := map[string]uint64{}
	for _, l := range lines {
		count[l.Probe] = l.Count
	}
	for _, once := range []string{"hotspot:vm__init__begin", "hotspot:vm__init__end", "hotspot:vm__shutdown"} {
		if count[once] != 1 {
			t.Errorf("%s counted %d, want 1", once, count[once])
		}
	}
}
