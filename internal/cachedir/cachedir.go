// Package cachedir names probekit's disk cache directory, for users with
// a home and for those without one (nobody, a systemd service with
// DynamicUser=yes).
package cachedir

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// None says why Dir is "", for messages.
const None = "no cache directory ($PROBEKIT_CACHE_DIR, $CACHE_DIRECTORY and $XDG_CACHE_HOME unset, and no home directory of the user's)"

// Dir is probekit's cache directory:
//
//   - $PROBEKIT_CACHE_DIR;
//   - else $CACHE_DIRECTORY, which systemd sets for a service with
//     CacheDirectory= (the first when it lists several), the service's
//     own directory, even for a DynamicUser;
//   - else $XDG_CACHE_HOME/probekit;
//   - else $HOME/.cache/probekit, when $HOME is a directory owned by the
//     effective user (nobody's /nonexistent is not, nor another user's
//     home a command kept in $HOME);
//   - else "": probekit then runs without a disk cache.
func Dir() string {
	if d := os.Getenv("PROBEKIT_CACHE_DIR"); d != "" {
		return d
	}
	if d, _, _ := strings.Cut(os.Getenv("CACHE_DIRECTORY"), ":"); d != "" {
		return d
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "probekit")
	}
	if home := os.Getenv("HOME"); home != "" && ownedDir(home) {
		return filepath.Join(home, ".cache", "probekit")
	}
	return ""
}

// ownedDir reports whether path is a directory owned by the effective
// user.
func ownedDir(path string) bool {
	fi, err := os.Stat(path)
	if err != nil || !fi.IsDir() {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Geteuid()
}
