package python

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf/btf"

	"github.com/probekit/probekit/interp"
	"github.com/probekit/probekit/interp/python/internal/pytest"
	"github.com/probekit/probekit/usdt/bpf"
)

// The Go constants are python.bpf.h's: its #defines, read from the
// header the module embeds, and its structs' sizes, from the BTF of a
// program built with it.
func TestHeaderConstants(t *testing.T) {
	defs := map[string]int64{}
	shift := regexp.MustCompile(`^\(1u << (\d+)\)$`)
	for _, line := range strings.Split(string(bpf.PythonHeader), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || f[0] != "#define" {
			continue
		}
		val, _, _ := strings.Cut(strings.Join(f[2:], " "), "/*")
		val = strings.TrimSpace(val)
		if m := shift.FindStringSubmatch(val); m != nil {
			n, _ := strconv.Atoi(m[1])
			defs[f[1]] = 1 << n
		} else if n, err := strconv.ParseInt(val, 0, 64); err == nil {
			defs[f[1]] = n
		}
	}
	for name, want := range map[string]int64{
		"PROBEKIT_INTERP_MAX_FRAMES":      MaxFrames,
		"PROBEKIT_INTERP_FLAG_RUN_END":    int64(interp.FlagRunEnd),
		"PROBEKIT_INTERP_FLAG_BAD":        int64(interp.FlagBad),
		"PROBEKIT_INTERP_STOP_END":        int64(StopEnd),
		"PROBEKIT_INTERP_STOP_DEPTH":      int64(StopDepth),
		"PROBEKIT_INTERP_STOP_READ":       int64(StopRead),
		"PROBEKIT_INTERP_STOP_NO_THREAD":  int64(StopNoThread),
		"PROBEKIT_INTERP_STOP_NO_PROCESS": int64(StopNoProcess),
		"PROBEKIT_INTERP_STOP_NO_FRAME":   int64(StopNoFrame),
		"PROBEKIT_PY_MODE_FRAMEOBJ":       modeFrameObject,
		"PROBEKIT_PY_MODE_ENTRY":          modeEntry,
		"PROBEKIT_PY_MODE_SHIM":           modeShim,
		"PROBEKIT_PY_READ":                maxRead,
	} {
		if got, ok := defs[name]; !ok || got != want {
			t.Errorf("%s: header %d (%v), Go %d", name, got, ok, want)
		}
	}
	spec, err := pytest.LoadPytest()
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]int{
		"probekit_interp_stack": StackRecordSize,
		"probekit_interp_frame": 16,
		"probekit_py_proc":      procValue,
	} {
		var s *btf.Struct
		if err := spec.Types.TypeByName(name, &s); err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if int(s.Size) != want {
			t.Errorf("struct %s: %d bytes, Go %d", name, s.Size, want)
		}
	}
}
