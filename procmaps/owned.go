package procmaps

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// ErrNotOwned: a file read on behalf of a process is owned by neither the
// process's user nor root, is writable by others, or is a root-owned file
// with other hard links reached for an unprivileged process.
var ErrNotOwned = errors.New("not owned by the process's user or root")

// OpenOwned opens path as p sees it, for reading content that probekit
// prints or trusts on p's behalf (a perf map, a debug file): resolved
// inside p's root as OpenInRoot does, without following a final symlink,
// a regular file, not blocking, and accepted only when
//
//   - it is owned by p's real or effective user, or by root;
//   - it is not writable by others;
//   - when p is not root's and the file is root's, it has a single link:
//     with fs.protected_hardlinks=0 a user can hard-link a root-only file
//     into a directory it controls, and the link keeps root's ownership;
//   - and, in that case too, it is not the root of a mount: in a user
//     namespace of its own (unshare -Urm) a user can bind-mount any file
//     it can look up, a root-only one included, onto a name it chose.
//
// A final symlink is refused, not followed: with fs.protected_symlinks=0
// (or in a tmpfs of the process's own mount namespace) the process could
// point the name at any file.
//
// These are the rules perf applies to /tmp/perf-PID.map (tools/perf
// util/symbol.c: the owner must be the user or root), tightened for a
// reader running as root. A refused file fails with ErrNotOwned.
//
// The objects maps names are opened with OpenObject, not OpenOwned: the
// identity check (device and inode) proves the file is the one mapped,
// and mmap(2) of a file needs a descriptor open for reading (EACCES
// otherwise), so what is printed from it is what the process could read
// itself. Ownership would refuse ordinary cases (a process of one user
// mapping a library another user installed). The one exception is what
// execve maps, the executable and its interpreter, which need only
// execute permission: of an execute-only file (mode 0711), parts the
// kernel does not map (.symtab) are read all the same.
func (p *Process) OpenOwned(path string) (*os.File, error) {
	r, err := p.checkedRoot()
	if err != nil {
		return nil, err
	}
	defer r.close()
	rel := r.relative(path)
	name := r.prefix + "/" + rel
	f, err := openRegular(r.fd, rel, unix.O_NOFOLLOW, inRoot, name)
	if errors.Is(err, unix.ELOOP) {
		// O_NOFOLLOW on a final symlink (open(2)).
		return nil, fmt.Errorf("pid %d: %s: %w: a symbolic link, not followed", p.PID, name, ErrNotOwned)
	}
	if err != nil {
		return nil, fmt.Errorf("pid %d: %w", p.PID, err)
	}
	if err := p.checkOwner(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("pid %d: %s: %w", p.PID, name, err)
	}
	return f, nil
}

func (p *Process) checkOwner(f *os.File) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return err
	}
	uids, err := p.uids()
	if err != nil {
		return err
	}
	if st.Mode&unix.S_IWOTH != 0 {
		return fmt.Errorf("%w: writable by others (mode %#o)", ErrNotOwned, st.Mode&0o7777)
	}
	if st.Uid == uids[0] || st.Uid == uids[1] {
		return nil
	}
	if st.Uid != 0 {
		return fmt.Errorf("%w: owner uid %d, process uids %d/%d", ErrNotOwned, st.Uid, uids[0], uids[1])
	}
	if st.Nlink != 1 {
		return fmt.Errorf("%w: root's file with %d links, for a process of uid %d", ErrNotOwned, st.Nlink, uids[0])
	}
	var stx unix.Statx_t
	if err := unix.Statx(int(f.Fd()), "", unix.AT_EMPTY_PATH, unix.STATX_BASIC_STATS, &stx); err != nil {
		return err
	}
	// STATX_ATTR_MOUNT_ROOT: Linux 5.8 (commit 80340fe3605c); older
	// kernels leave it out of the mask and the check passes.
	if stx.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT != 0 && stx.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0 {
		return fmt.Errorf("%w: root's file mounted on this name, for a process of uid %d", ErrNotOwned, uids[0])
	}
	return nil
}

// uids returns p's real and effective user ids (/proc/PID/status "Uid:").
func (p *Process) uids() ([2]uint32, error) {
	b, err := os.ReadFile(p.path("status"))
	if err != nil {
		return [2]uint32{}, wrapProcErr(p.PID, "status", err)
	}
	if err := p.Check(); err != nil {
		return [2]uint32{}, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		rest, ok := bytes.CutPrefix(sc.Bytes(), []byte("Uid:"))
		if !ok {
			continue
		}
		fields := bytes.Fields(rest)
		if len(fields) < 2 {
			break
		}
		var ids [2]uint32
		for i := range ids {
			v, err := strconv.ParseUint(string(fields[i]), 10, 32)
			if err != nil {
				return ids, fmt.Errorf("pid %d: status Uid %q: %w", p.PID, rest, err)
			}
			ids[i] = uint32(v)
		}
		return ids, nil
	}
	return [2]uint32{}, fmt.Errorf("pid %d: status has no Uid line", p.PID)
}
