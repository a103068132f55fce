package procmaps

import "errors"

var (
	// ErrProcessGone indicates the process exited (or is a zombie whose memory is
	// already released) since it was opened. Errors carrying it also
	// match os.ErrNotExist.
	ErrProcessGone = errors.New("process is gone")

	// ErrProcessChanged indicates the PID now belongs to another process (the
	// start time in /proc/PID/stat differs), so nothing read through that
	// PID describes the process that was opened.
	ErrProcessChanged = errors.New("PID belongs to another process now")

	// ErrNotMapped indicates the process maps no such file, or no mapping of the
	// object holds the address or file offset.
	ErrNotMapped = errors.New("not mapped")

	// ErrAmbiguous indicates a file offset is mapped at several runtime addresses
	// (a file page shared by two segments, or a library loaded twice);
	// narrow it with the permissions the target must have.
	ErrAmbiguous = errors.New("file offset is mapped at several addresses")

	// ErrBadLine indicates a /proc/PID/maps line that does not follow the kernel's
	// format (see ParseLine). ParseMaps counts such lines and goes on.
	ErrBadLine = errors.New("malformed maps line")

	// ErrIdentity indicates the file opened for an object is not the file the
	// process maps (device or inode differ): the path now names another
	// file, or names it only outside the process's root.
	ErrIdentity = errors.New("opened file is not the mapped file")
)
