package main

import (
	"errors"
	"strings"
	"testing"
)

// TestTraceRingSizeTooLarge: a ring size above the ceiling says the
// ceiling (4G once read as "want a size such as 16M").
func TestTraceRingSizeTooLarge(t *testing.T) {
	for _, arg := range []string{"2G", "4G", "4096M", "99999999999G", "8589934592"} {
		_, err := parseTrace([]string{"--ring-size", arg, "f:p:n"})
		var ue *usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), "at most 1024M") {
			t.Errorf("--ring-size %s: %v, want a usage error naming the maximum", arg, err)
		}
	}
}

// TestTraceCountZero: -n 0 is refused (it silently meant no limit);
// without -n there is no limit, and -n 1 is one hit.
func TestTraceCountZero(t *testing.T) {
	_, err := parseTrace([]string{"-n", "0", "f:p:n"})
	var ue *usageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "-n 0") || !strings.Contains(err.Error(), "at least 1") {
		t.Errorf("-n 0: %v, want a usage error", err)
	}
	if _, err := parseTrace([]string{"--count", "-n", "0", "f:p:n"}); !errors.As(err, &ue) {
		t.Errorf("--count -n 0: %v, want a usage error", err)
	}
	for _, c := range []struct {
		args []string
		want int
	}{{[]string{"f:p:n"}, 0}, {[]string{"-n", "1", "f:p:n"}, 1}} {
		req, err := parseTrace(c.args)
		if err != nil || req.Limit != c.want {
			t.Errorf("%q: %v, count %v; want %d", c.args, err, req, c.want)
		}
	}
}
