package semaphore

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"

	"github.com/probekit/probekit/procmaps"
	"golang.org/x/sys/unix"
)

// ErrSiteChanged indicates that the memory at a semaphore's address is
// no longer what it was when the counter was raised: the object was
// unloaded (dlclose) and the address unmapped or reused, or the process
// ran exec. Nothing is written there.
var ErrSiteChanged = errors.New("the memory at the semaphore's address changed (object unloaded or process exec'd)")

// Site is the identity of the memory holding a semaphore, taken when
// the counter is raised and compared before each later write, so that a
// write never lands in memory reused since.
//
// It names the mapping that holds the address: its file (device and
// inode) and the file offset at the address, or for anonymous memory
// the mapping's bounds; and the process image, by the addresses of its
// argument and environment strings (/proc/PID/stat fields arg_start and
// env_end), which exec sets anew: at other addresses under address
// space randomisation.
//
// The check and the write are two steps: a process that unloads the
// object between them is not stopped. What it closes is the common
// case, a release long after the object or the image went.
type Site struct {
	Dev, Inode uint64
	// Offset is the file offset at the address (the mapping's start for
	// anonymous memory, with End its end).
	Offset, End uint64
	// ArgStart and EnvEnd are the process image's (0 when not readable).
	ArgStart, EnvEnd uint64
}

// SiteOf returns the Site of the 2-byte counter at addr in proc; an
// address outside a writable mapping is ErrNotWritable.
func SiteOf(proc *procmaps.Process, addr uint64) (Site, error) {
	maps, _, err := proc.Mappings()
	if err != nil {
		return Site{}, fmt.Errorf("semaphore: %w", err)
	}
	var s Site
	found := false
	for _, m := range maps {
		if addr >= m.Start && addr+2 <= m.End {
			if m.Perms&procmaps.Write == 0 {
				break
			}
			s.Dev, s.Inode = m.Dev, m.Inode
			if m.Inode != 0 {
				s.Offset = m.Offset + (addr - m.Start)
			} else {
				s.Offset, s.End = m.Start, m.End
			}
			found = true
			break
		}
	}
	if !found {
		return Site{}, fmt.Errorf("semaphore at %#x in %v: %w", addr, proc, ErrNotWritable)
	}
	s.ArgStart, s.EnvEnd, err = imageID(proc)
	if err != nil {
		return Site{}, fmt.Errorf("semaphore: %w", err)
	}
	return s, nil
}

// maxStat bounds the read of /proc/PID/stat (52 numbers and a 16-byte
// name, escaped at most 4 times: under 1.3 KB).
const maxStat = 4 << 10

// imageID reads arg_start and env_end, fields 48 and 51 of
// /proc/PID/stat (proc(5); Linux 3.5), and checks proc's identity after.
func imageID(proc *procmaps.Process) (argStart, envEnd uint64, err error) {
	path := "/proc/" + strconv.Itoa(proc.PID) + "/stat"
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		if cerr := proc.Check(); cerr != nil {
			return 0, 0, cerr
		}
		return 0, 0, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var buf [maxStat]byte
	n, err := unix.Read(fd, buf[:])
	if err != nil {
		return 0, 0, &os.PathError{Op: "read", Path: path, Err: err}
	}
	if cerr := proc.Check(); cerr != nil {
		return 0, 0, cerr
	}
	argStart, envEnd, ok := parseImageID(buf[:max(n, 0)])
	if !ok {
		return 0, 0, fmt.Errorf("%s: no arg_start and env_end", path)
	}
	return argStart, envEnd, nil
}

// parseImageID returns fields 48 and 51 of a /proc/PID/stat line: the
// fields after the name, which ends at the last ')'.
func parseImageID(b []byte) (argStart, envEnd uint64, ok bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, false
	}
	fields := bytes.Fields(b[i+1:])
	// fields[0] is field 3 (state).
	if len(fields) < 51-2 {
		return 0, 0, false
	}
	a, err1 := strconv.ParseUint(string(fields[48-3]), 10, 64)
	e, err2 := strconv.ParseUint(string(fields[51-3]), 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return a, e, true
}

// checkSite returns ErrSiteChanged when the memory at addr in proc is no
// longer want; a process gone or changed, its procmaps error.
func checkSite(proc *procmaps.Process, addr uint64, want Site) error {
	got, err := SiteOf(proc, addr)
	switch {
	case errors.Is(err, ErrNotWritable):
		return fmt.Errorf("semaphore at %#x in %v: %w", addr, proc, ErrSiteChanged)
	case err != nil:
		return err
	case got != want:
		return fmt.Errorf("semaphore at %#x in %v: %w (was %+v, now %+v)", addr, proc, ErrSiteChanged, want, got)
	}
	return nil
}
