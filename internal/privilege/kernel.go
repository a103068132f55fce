package privilege

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Version is a kernel release's major.minor.
type Version [2]int

func (v Version) String() string { return fmt.Sprintf("%d.%d", v[0], v[1]) }

// Less reports whether v is older than w.
func (v Version) Less(w Version) bool {
	return v[0] < w[0] || v[0] == w[0] && v[1] < w[1]
}

// parseRelease reads the leading "major.minor" of a release string
// ("5.10.0-32-amd64", "6.18").
func parseRelease(s string) (Version, error) {
	var v Version
	parts := strings.SplitN(s, ".", 3)
	if len(parts) < 2 {
		return v, fmt.Errorf("kernel release %q: want MAJOR.MINOR", s)
	}
	for i := range 2 {
		p := parts[i]
		if j := strings.IndexFunc(p, func(r rune) bool { return r < '0' || r > '9' }); j >= 0 {
			p = p[:j]
		}
		n, err := strconv.Atoi(p)
		if err != nil || n > 1<<16 {
			return v, fmt.Errorf("kernel release %q: want MAJOR.MINOR", s)
		}
		v[i] = n
	}
	return v, nil
}

// RunningKernel is uname(2)'s release.
func RunningKernel() (Version, error) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return Version{}, fmt.Errorf("uname: %w", err)
	}
	return parseRelease(unix.ByteSliceToString(u.Release[:]))
}

// Sysctl is a kernel setting that may refuse what the capabilities
// allow, with its value on this machine.
type Sysctl struct {
	Name  string // kernel.perf_event_paranoid
	Value int    // -1 when it could not be read
	Known bool   // false when the kernel has no such setting
}

// procSys is where sysctls are read (a test points it elsewhere).
var procSys = "/proc/sys"

// readSysctl reads an integer sysctl by its dotted name.
func readSysctl(name string) Sysctl {
	s := Sysctl{Name: name, Value: -1}
	b, err := os.ReadFile(procSys + "/" + strings.ReplaceAll(name, ".", "/"))
	if err != nil {
		s.Known = !os.IsNotExist(err)
		return s
	}
	s.Known = true
	if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
		s.Value = n
	}
	return s
}
