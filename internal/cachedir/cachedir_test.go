package cachedir

import (
	"os"
	"path/filepath"
	"testing"
)

func TestDir(t *testing.T) {
	home := t.TempDir() // the test's user's
	for _, c := range []struct {
		name                      string
		probekit, systemd, xdg, h string
		want                      string
	}{
		{"PROBEKIT_CACHE_DIR first", "/p", "/var/cache/probekit", "/x", home, "/p"},
		{"systemd's CacheDirectory=", "", "/var/cache/probekit", "/x", home, "/var/cache/probekit"},
		{"systemd's first of several", "", "/var/cache/a:/var/cache/b", "", "", "/var/cache/a"},
		{"XDG", "", "", "/x", home, "/x/probekit"},
		{"home", "", "", "", home, filepath.Join(home, ".cache", "probekit")},
		{"nobody's /nonexistent", "", "", "", "/nonexistent", ""},
		{"no $HOME (DynamicUser)", "", "", "", "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("PROBEKIT_CACHE_DIR", c.probekit)
			t.Setenv("CACHE_DIRECTORY", c.systemd)
			t.Setenv("XDG_CACHE_HOME", c.xdg)
			t.Setenv("HOME", c.h)
			if got := Dir(); got != c.want {
				t.Errorf("Dir() = %q, want %q", got, c.want)
			}
		})
	}
}

// A home that is another user's (a command that kept $HOME=/root for
// nobody) is not used.
func TestDirOthersHome(t *testing.T) {
	t.Setenv("PROBEKIT_CACHE_DIR", "")
	t.Setenv("CACHE_DIRECTORY", "")
	t.Setenv("XDG_CACHE_HOME", "")
	other := "/" // root's, for a user
	if os.Geteuid() == 0 {
		other = t.TempDir()
		if err := os.Chown(other, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("HOME", other)
	if got := Dir(); got != "" {
		t.Errorf("HOME=%s for uid %d: %q", other, os.Geteuid(), got)
	}
}
