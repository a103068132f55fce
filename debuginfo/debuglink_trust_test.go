package debuginfo

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestDebugLinkHuge: a debuglink target of 4 GiB (sparse: the right
// debug file, extended) is refused as ErrTooLarge without being read;
// the old code read all 4 GiB for its CRC-32.
func TestDebugLinkHuge(t *testing.T) {
	dir := t.TempDir()
	obj := copyTo(t, fixture("dbg_v5"), dir, "dbg_v5")
	big := copyTo(t, fixture("dbg_v5.debug"), dir, "dbg_v5.debug")
	if err := os.Truncate(big, 4<<30); err != nil {
		t.Skipf("no sparse 4 GiB file here: %v", err)
	}
	start := time.Now()
	d, warns, err := find(t, obj, &Options{DebugDirs: []string{t.TempDir()}, Offline: true})
	if !errors.Is(err, ErrNotFound) || d != nil {
		t.Fatalf("found %v (%v)", d, err)
	}
	if len(warns) != 1 || !errors.Is(warns[0], ErrTooLarge) {
		t.Fatalf("warnings %v, want one ErrTooLarge", warns)
	}
	t.Logf("refused in %v", time.Since(start))
}

// TestDebugLinkBesideTrust: beside the object, on the host, a debuglink
// target that is a symbolic link (to a root-owned copy of the right
// file) or another user's file is refused with ErrNotTrusted; one of the
// object's owner is used. The old code followed the link and took the
// other user's file.
func TestDebugLinkBesideTrust(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown to another user needs root")
	}
	target := copyTo(t, fixture("dbg_v5.debug"), t.TempDir(), "elsewhere.debug")
	for _, c := range []struct {
		name  string
		setup func(t *testing.T, obj, debug string)
		ok    bool
	}{
		{"symbolic link", func(t *testing.T, obj, debug string) { must(t, os.Symlink(target, debug)) }, false},
		{"another user's", func(t *testing.T, obj, debug string) {
			copyTo(t, fixture("dbg_v5.debug"), filepath.Dir(debug), filepath.Base(debug))
			must(t, os.Chown(debug, 65534, 65534))
		}, false},
		{"writable by others", func(t *testing.T, obj, debug string) {
			copyTo(t, fixture("dbg_v5.debug"), filepath.Dir(debug), filepath.Base(debug))
			must(t, os.Chmod(debug, 0o646))
		}, false},
		{"root's hard link beside another user's object", func(t *testing.T, obj, debug string) {
			must(t, os.Link(target, debug))
			must(t, os.Chown(obj, 65534, 65534))
		}, false},
		{"the object's owner's", func(t *testing.T, obj, debug string) {
			copyTo(t, fixture("dbg_v5.debug"), filepath.Dir(debug), filepath.Base(debug))
			must(t, os.Chown(debug, 65534, 65534))
			must(t, os.Chown(obj, 65534, 65534))
		}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			obj := copyTo(t, fixture("dbg_v5"), dir, "dbg_v5")
			debug := filepath.Join(dir, "dbg_v5.debug")
			c.setup(t, obj, debug)
			d, warns, err := find(t, obj, &Options{DebugDirs: []string{t.TempDir()}, Offline: true})
			if c.ok {
				if err != nil || d.Path != debug || len(warns) != 0 {
					t.Fatalf("found %v (%v), warnings %v, want %s", d, err, warns, debug)
				}
				return
			}
			if err == nil {
				t.Fatalf("found %s", d.Path)
			}
			if len(warns) != 1 || !errors.Is(warns[0], ErrNotTrusted) {
				t.Fatalf("warnings %v, want one ErrNotTrusted", warns)
			}
		})
	}
}
