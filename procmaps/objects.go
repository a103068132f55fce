package procmaps

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// FileID identifies a file by device and inode, as the kernel does when it
// places a uprobe: two containers may name one file differently, and one
// name may be two files.
type FileID struct {
	// Dev is in the st_dev encoding (unix.Mkdev).
	Dev   uint64
	Inode uint64
}

func (id FileID) String() string {
	return fmt.Sprintf("%x:%x inode %d", unix.Major(id.Dev), unix.Minor(id.Dev), id.Inode)
}

// IDOf returns the identity of the file at path (symlinks followed), as
// seen from the caller's mount namespace.
func IDOf(path string) (FileID, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return FileID{}, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	return FileID{Dev: st.Dev, Inode: st.Ino}, nil
}

// Object is a file a process has mapped, with its mappings.
type Object struct {
	// Path is the name in /proc/PID/maps: the path as the process's mount
	// namespace sees it (for a process that chroot()ed without its own
	// mount namespace, the path outside its root).
	Path string
	// HostPath is a path this process can open to get the same file
	// (same device and inode), checked when the object was listed:
	// Path itself when the target shares our mount namespace and root,
	// /proc/PID/root/Path for a container, or /proc/PID/map_files/START-END
	// for a deleted or otherwise unreachable file (which needs
	// CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE). "" when none works;
	// Process.OpenObject says why. The /proc paths are valid only while
	// the process lives.
	HostPath string
	// Dev (st_dev encoding) and Inode identify the file.
	Dev, Inode uint64
	// Deleted is set when maps marks the file deleted (unlinked or
	// replaced since it was mapped, or a memfd).
	Deleted bool
	// Mappings are the object's lines of maps, in address order.
	Mappings []Mapping
}

// ID returns the object's file identity.
func (o *Object) ID() FileID { return FileID{Dev: o.Dev, Inode: o.Inode} }

// Address translates a file offset to the runtime address where the
// process maps it: the mapping of the object whose [Offset,
// Offset+(End-Start)) holds off gives Start - Offset + off. need lists the permissions the mapping must have (Exec for a
// probe site, Write for a semaphore; 0 for any): one file page is often
// mapped twice, read-only and read-write, at different addresses. If
// mappings with different addresses remain, the error wraps ErrAmbiguous.
func (o *Object) Address(off uint64, need Perms) (uint64, error) {
	var addr uint64
	found := false
	for i := range o.Mappings {
		m := &o.Mappings[i]
		if m.Perms&need != need || !m.holdsOffset(off) {
			continue
		}
		// Start - Offset + off, ordered so that no step underflows.
		a := m.Start + (off - m.Offset)
		if found && a != addr {
			return 0, fmt.Errorf("%s: offset %#x at %#x and %#x: %w (ask for the permissions of the segment, e.g. Exec or Write)",
				o.Path, off, addr, a, ErrAmbiguous)
		}
		addr, found = a, true
	}
	if !found {
		return 0, fmt.Errorf("%s: file offset %#x with permissions %v: %w", o.Path, off, need, ErrNotMapped)
	}
	return addr, nil
}

// FileOffset translates a runtime address in the object to its file
// offset: Offset + (addr - Start) of the mapping holding addr.
func (o *Object) FileOffset(addr uint64) (uint64, error) {
	for i := range o.Mappings {
		m := &o.Mappings[i]
		if addr >= m.Start && addr < m.End {
			return m.Offset + (addr - m.Start), nil
		}
	}
	return 0, fmt.Errorf("%s: address %#x: %w", o.Path, addr, ErrNotMapped)
}

// groupObjects collects the file-backed mappings by (device, inode,
// path), in order of first appearance.
func groupObjects(maps []Mapping) []Object {
	type key struct {
		id   FileID
		path string
	}
	index := make(map[key]int)
	var objs []Object
	for _, m := range maps {
		if !m.FileBacked() {
			continue
		}
		k := key{m.ID(), m.Path}
		i, ok := index[k]
		if !ok {
			i = len(objs)
			index[k] = i
			objs = append(objs, Object{Path: m.Path, Dev: m.Dev, Inode: m.Inode})
		}
		o := &objs[i]
		o.Deleted = o.Deleted || m.Deleted
		o.Mappings = append(o.Mappings, m)
	}
	return objs
}

// Objects returns the files pid has mapped; see Process.Objects.
func Objects(pid int) (*Process, []Object, error) {
	p, err := Open(pid)
	if err != nil {
		return nil, nil, err
	}
	objs, err := p.Objects()
	if err != nil {
		return nil, nil, err
	}
	return p, objs, nil
}

// Objects returns the files the process has mapped (pseudo mappings such
// as [vdso], [anon:…] and anonymous memory left out), each with a
// HostPath checked by device and inode.
func (p *Process) Objects() ([]Object, error) {
	r, err := p.openRoot()
	if err != nil {
		return nil, err
	}
	defer r.close()
	maps, _, err := p.Mappings() // checks identity, after the root was opened
	if err != nil {
		return nil, err
	}
	objs := groupObjects(maps)
	for i := range objs {
		if f, via, err := r.openObject(p, &objs[i]); err == nil {
			f.Close()
			objs[i].HostPath = via
		}
	}
	return objs, nil
}

// Object returns the object of file id in the process, ErrNotMapped if
// it maps no such file. HostPath is not filled in (see OpenObject).
func (p *Process) Object(id FileID) (*Object, error) {
	maps, _, err := p.Mappings()
	if err != nil {
		return nil, err
	}
	for _, o := range groupObjects(maps) {
		if o.ID() == id {
			// Merge other names of the same file (bind mounts, hard
			// links): the kernel's uprobe sees one inode.
			return mergeByID(o, maps), nil
		}
	}
	return nil, fmt.Errorf("pid %d: file %v: %w", p.PID, id, ErrNotMapped)
}

func mergeByID(o Object, maps []Mapping) *Object {
	o.Mappings = nil
	for _, m := range maps {
		if m.FileBacked() && m.ID() == o.ID() {
			o.Deleted = o.Deleted || m.Deleted
			o.Mappings = append(o.Mappings, m)
		}
	}
	return &o
}

// Address returns the runtime address of file offset off of file id in
// the process (see Object.Address): for a semaphore,
// p.Address(id, off, procmaps.Write).
func (p *Process) Address(id FileID, off uint64, need Perms) (uint64, error) {
	o, err := p.Object(id)
	if err != nil {
		return 0, err
	}
	return o.Address(off, need)
}
