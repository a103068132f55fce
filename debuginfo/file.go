package debuginfo

import (
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"

	"github.com/probekit/probekit/internal/safeelf"
)

// dupFile duplicates f's descriptor (close-on-exec), so that a File of
// SourceSelf can be closed without closing the caller's object.
func dupFile(f *os.File) (*os.File, error) {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "dup", Path: f.Name(), Err: err}
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}

// sameFile reports whether a and b are the same file (device and inode).
func sameFile(a, b *os.File) bool {
	var sa, sb unix.Stat_t
	if unix.Fstat(int(a.Fd()), &sa) != nil || unix.Fstat(int(b.Fd()), &sb) != nil {
		return false
	}
	return sa.Dev == sb.Dev && sa.Ino == sb.Ino
}

// BuildID returns the GNU build ID of the ELF file r (its NT_GNU_BUILD_ID
// note), nil when it has none. A corrupt file or note is an error.
func BuildID(r io.ReaderAt) ([]byte, error) {
	ef, err := safeelf.NewFile(r)
	if err != nil {
		return nil, fmt.Errorf("debuginfo: %w", err)
	}
	id, err := ef.BuildID()
	if err != nil {
		return nil, fmt.Errorf("debuginfo: %w", err)
	}
	return id, nil
}

// ReadSection returns the contents of the debug file's section name,
// decompressed when it is compressed (SHF_COMPRESSED with zlib or zstd,
// or the legacy .zdebug_* form, found for a ".debug_*" name), nil when
// the file has no such section. Neither its size on disk nor its
// uncompressed size may exceed limit bytes: a hostile header cannot make
// it allocate more. debug/elf decompresses too, but trusts the sizes its
// headers claim and documents no hardening.
func (f *File) ReadSection(name string, limit uint64) ([]byte, error) {
	ef, err := safeelf.NewFile(f.File)
	if err != nil {
		return nil, fmt.Errorf("debuginfo: %s: %w", f.Path, err)
	}
	b, err := ef.DebugSection(name, limit)
	if err != nil {
		return nil, fmt.Errorf("debuginfo: %s: %w", f.Path, err)
	}
	return b, nil
}
