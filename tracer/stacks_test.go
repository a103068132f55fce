package tracer

import (
	"encoding/json"
	"testing"

	"github.com/probekit/probekit/bpfunwind"
	"github.com/probekit/probekit/symbolize"
)

// Each end of a CFI walk but the outermost frame is a cut, named by its
// cause and where the walk stopped.
func TestCFICut(t *testing.T) {
	frames := []symbolize.Frame{{Address: 0x1000, Object: "/bin/a"}, {Address: 0x2345, Object: "/lib/b.so"}}
	for _, c := range []struct {
		stop   bpfunwind.Stop
		fpLast bool
		n      int
		want   string
	}{
		{bpfunwind.StopOutermost, false, 2, ""},
		{bpfunwind.StopOutermost, true, 2, ""},
		{bpfunwind.StopRead, true, 2, "no unwind info for /lib/b.so at 0x2345"},
		{bpfunwind.StopRead, false, 2, "unreadable stack memory after /lib/b.so at 0x2345"},
		{bpfunwind.StopUnsupported, false, 2, "unwind rule the walk does not compute at /lib/b.so at 0x2345"},
		{bpfunwind.StopNoProgress, false, 2, "stack pointer did not grow at /lib/b.so at 0x2345"},
		{bpfunwind.StopDepth, true, 127, "depth limit of 127 frames"},
		{bpfunwind.StopRead, false, 0, "no stack: the walk read no frame"},
	} {
		if got := cfiCut(c.stop, c.fpLast, c.n, frames[:min(c.n, 2)]); got != c.want {
			t.Errorf("stop %v fpLast %v: %q, want %q", c.stop, c.fpLast, got, c.want)
		}
	}
	if got := fpCut(127); got != "depth limit of 127 frames" {
		t.Errorf("fpCut(127) = %q", got)
	}
	if got := fpCut(3); got != "" {
		t.Errorf("fpCut(3) = %q", got)
	}
}

// The marker ends the text stack and follows the JSON array; a whole
// stack has neither.
func TestStackMarkers(t *testing.T) {
	frames := []symbolize.Frame{{Address: 0x10, Function: "f", Object: "/x"}}
	cut := "no unwind info for /x\n at 0x10"
	text := string(appendStackText(nil, frames, cut))
	if want := "    " + frames[0].String() + "\n    [truncated: no unwind info for /x\\n at 0x10]\n"; text != want {
		t.Errorf("text %q, want %q", text, want)
	}
	if text := string(appendStackText(nil, frames, "")); text != "    "+frames[0].String()+"\n" {
		t.Errorf("whole text %q", text)
	}
	var v struct {
		Stack     []json.RawMessage `json:"stack"`
		Truncated *string           `json:"truncated"`
	}
	b := append(appendStackJSON([]byte(`{"k":1`), frames, cut), '}')
	if err := json.Unmarshal(b, &v); err != nil || len(v.Stack) != 1 || v.Truncated == nil || *v.Truncated != cut {
		t.Errorf("JSON %s: %v, %+v", b, err, v)
	}
	v.Truncated = nil
	b = append(appendStackJSON([]byte(`{"k":1`), frames, ""), '}')
	if err := json.Unmarshal(b, &v); err != nil || v.Truncated != nil {
		t.Errorf("whole JSON %s: %v", b, err)
	}
}

// A Python frame prints as function, file:line and [python]; in JSON as
// function, file, line and runtime, with no address, offset or object.
func TestStackPythonFrame(t *testing.T) {
	frames := []symbolize.Frame{
		{Address: 0x10, Function: "f", Object: "/x"},
		{Function: "inner", File: "/app.py", Line: 3, Runtime: "python"},
	}
	text := string(appendStackText(nil, frames, ""))
	if want := "    0x10 f+0x0 (/x)\n    inner /app.py:3 [python]\n"; text != want {
		t.Errorf("text %q, want %q", text, want)
	}
	b := append(appendStackJSON([]byte(`{"k":1`), frames, ""), '}')
	var v struct {
		Stack []map[string]any `json:"stack"`
	}
	if err := json.Unmarshal(b, &v); err != nil || len(v.Stack) != 2 {
		t.Fatalf("JSON %s: %v", b, err)
	}
	py := v.Stack[1]
	if len(py) != 4 || py["function"] != "inner" || py["file"] != "/app.py" || py["line"] != 3.0 || py["runtime"] != "python" {
		t.Errorf("Python frame in JSON: %v", py)
	}
	if got := leftoverCut(2); got != "2 Python frames past the native stack's eval-loop frames" {
		t.Errorf("leftoverCut(2) = %q", got)
	}
}
