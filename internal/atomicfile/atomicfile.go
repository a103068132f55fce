// Package atomicfile writes the files probekit makes for its user (a
// --pprof profile) so that no reader sees one half written: the bytes
// go to a temporary file in the same directory, which is synced and
// then renamed over the final path. A write that fails, or a crash
// before the rename, leaves the file that was there before, and the
// temporary is removed on every error path.
//
// The final path is never opened. rename(2) replaces a symbolic link
// planted there (in /tmp, by another user) instead of following it, so
// probekit running as root cannot be steered into overwriting the file
// it points to. The temporary is created with O_CREAT|O_EXCL
// (os.CreateTemp), which also refuses a symbolic link. An existing path
// that is neither a regular file nor a symbolic link (a directory, a
// device such as /dev/null, a FIFO) is refused: renaming over it would
// replace a device node, not write to it.
package atomicfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// DefaultPerm is the mode of a new file (before the rename; the umask
// does not apply): readable by all, as os.Create's 0666 under the usual
// umask 022 would make it.
const DefaultPerm fs.FileMode = 0o644

// ErrNotRegular: the path names something other than a regular file or
// a symbolic link.
var ErrNotRegular = errors.New("not a regular file")

// Write calls write with a temporary file beside path, then renames it
// to path. The file gets the permission bits of the regular file it
// replaces, else DefaultPerm. Errors name path.
func Write(path string, write func(io.Writer) error) error {
	perm := DefaultPerm
	switch st, serr := os.Lstat(path); {
	case serr == nil && st.Mode().IsRegular():
		perm = st.Mode().Perm()
	case serr == nil && st.Mode()&fs.ModeSymlink == 0:
		return &fs.PathError{Op: "write", Path: path, Err: fmt.Errorf("%w (%v): it is not replaced", ErrNotRegular, st.Mode().Type())}
	case serr != nil && !errors.Is(serr, fs.ErrNotExist):
		return serr
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".tmp*")
	if err != nil {
		return err
	}
	renamed := false
	defer func() { // on every error path, a panic in write too
		if !renamed {
			tmp.Close() // again after a failed Close: harmless
			os.Remove(tmp.Name())
		}
	}()
	if err := write(tmp); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	// The data on disk before the name: a crash after the rename must
	// not leave an empty file under it.
	if err := tmp.Chmod(perm); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	renamed = true
	// The rename itself on disk; a failure here loses nothing written.
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}
