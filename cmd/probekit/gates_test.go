package main

import (
	"strings"
	"testing"
)

// Without sys.setprofile, CPython 3.11 fires function__entry for its
// start-up frames only (entered from C), not for hello's call: probekit
// trace prints those hits and says at the end, on stderr, that the
// command set no profile function, in events and in count mode.
func TestRuntimePythonGateClosed(t *testing.T) {
	requireRuntime(t, "/usr/bin/python3.11")
	const hint = "python:function__entry: CPython fires it for every call only with a profile or trace function set in the process (sys.setprofile or sys.settrace), and the command set none while traced"
	for _, mode := range [][]string{{"--str", "1,2"}, {"--count"}} {
		out, errOut := traceStderr(t, append(mode, "/usr/bin/python3.11:python:function__entry", "--",
			"/usr/bin/python3.11", "-c", "def hello(): pass\nhello()")...)
		if strings.Contains(out, `"hello"`) {
			t.Errorf("%v: hello's call fired function__entry without a profile function:\n%.2000s", mode, out)
		}
		if !strings.Contains(errOut, hint) {
			t.Errorf("%v: no hint on stderr: %s", mode, errOut)
		}
	}
}
