package tracer

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/probekit/probekit/procmaps"
	"github.com/probekit/probekit/record"
	"github.com/probekit/probekit/usdt"
)

// checkCommand warns when the program Config.Command runs lacks USDT
// probes the Config asks for in it. The command runs what the shell
// would run (exec.LookPath: the first executable of that name on PATH),
// never another file: a wrapper first on PATH (a pyenv shim, a script)
// is what runs. The warning names the file that runs and the file on
// PATH, or the probe's own path, that has the probes.
func (t *tracer) checkCommand() {
	name := t.cfg.Command[0]
	path, err := exec.LookPath(name)
	if err != nil && !errors.Is(err, exec.ErrDot) {
		return // the launch says why
	}
	for _, p := range t.cfg.Probes {
		if p.Kind != record.KindUSDT || !commandTarget(p.Target, name, path) {
			continue
		}
		pattern := p.Provider + ":" + p.Name
		why := ""
		f, err := usdt.Open(path)
		switch {
		case err == nil && len(f.Match(pattern)) > 0:
			continue
		case err == nil || errors.Is(err, usdt.ErrNoProbes):
			why = "which has no probe " + pattern
		case isScript(path):
			why = "a script, not an ELF file: its probes are those of the program it starts"
			if !t.cfg.Follow {
				why += ", attached only with Follow (-f)"
			}
		default:
			why = "whose probes cannot be read (" + err.Error() + ")"
		}
		hint := ""
		if alt := probesOnPath(p.Target, name, path, pattern); alt != "" {
			hint = "; " + alt + " has " + pattern + ": give its path as the command to trace it"
		}
		t.otherCommand = true
		t.warnf("the command %s runs %s (as the shell would, from PATH), %s%s", name, path, why, hint)
	}
}

// commandTarget reports whether a probe's target names the command's
// program: its name as given, its path, or a path with its file name.
func commandTarget(target, name, path string) bool {
	return target == name || target == path ||
		strings.ContainsRune(target, '/') && filepath.Base(target) == filepath.Base(path)
}

// probesOnPath returns a file other than path that has probes matching
// pattern: the target itself when it is a path, else the first of name
// on PATH; "" when none has.
func probesOnPath(target, name, path, pattern string) string {
	var candidates []string
	if strings.ContainsRune(target, '/') {
		candidates = []string{target}
	} else if !strings.ContainsRune(name, '/') {
		for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
			if dir != "" && filepath.IsAbs(dir) {
				candidates = append(candidates, filepath.Join(dir, name))
			}
		}
	}
	for _, c := range candidates {
		if c == path {
			continue
		}
		if f, err := usdt.Open(c); err == nil && len(f.Match(pattern)) > 0 {
			return c
		}
	}
	return ""
}

// isScript reports whether path starts with "#!".
func isScript(path string) bool {
	f, err := procmaps.OpenFile(path) // regular files only, not blocking
	if err != nil {
		return false
	}
	defer f.Close()
	var b [2]byte
	n, _ := f.Read(b[:])
	return n == 2 && string(b[:]) == "#!"
}
