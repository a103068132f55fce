package procmaps

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"sync"
	"syscall"
	"unsafe"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"
)

// procRoot is where procfs is mounted.
const procRoot = "/proc"

var procFS = sync.OnceValues(func() (procfs.FS, error) { return procfs.NewFS(procRoot) })

// testHookAfterRead, when set by a test, runs after a /proc read and
// before the identity check that validates it: the window in which a
// target can exit or its PID be reused.
var testHookAfterRead func(pid int)

// Process is a process identity: a PID and the start time of the process
// that had it when it was opened. The kernel may give a PID to a new
// process once the old one is reaped; the start time tells them apart.
// Methods fail with ErrProcessGone or ErrProcessChanged
// instead of describing another process.
type Process struct {
	PID int
	// StartTime is field 22 of /proc/PID/stat: clock ticks after boot.
	StartTime uint64
}

// Open returns the identity of the process pid now has.
func Open(pid int) (*Process, error) {
	if pid <= 0 {
		return nil, fmt.Errorf("pid %d: %w: not a process id", pid, os.ErrInvalid)
	}
	start, zombie, err := readStart(pid)
	if err != nil {
		return nil, wrapProcErr(pid, "stat", err)
	}
	p := &Process{PID: pid, StartTime: start}
	if zombie {
		return nil, p.gone("it is a zombie: it exited and its memory is released")
	}
	return p, nil
}

// String formats p as "pid N (start T)".
func (p *Process) String() string {
	return fmt.Sprintf("pid %d (start %d)", p.PID, p.StartTime)
}

// Check reports whether p is still running: nil, or an error matching
// ErrProcessGone (and os.ErrNotExist) or ErrProcessChanged.
func (p *Process) Check() error {
	start, zombie, err := readStart(p.PID)
	switch {
	case err != nil:
		return wrapProcErr(p.PID, "stat", err)
	case start != p.StartTime:
		return p.changed(start)
	case zombie:
		return p.gone("it is a zombie: it exited and its memory is released")
	}
	return nil
}

// path is /proc/PID/name.
func (p *Process) path(name string) string {
	return procRoot + "/" + strconv.Itoa(p.PID) + "/" + name
}

// Mappings reads /proc/PID/maps. bad counts lines that could not be
// parsed and were skipped. The process's identity is checked after the
// read, so the mappings are those of p.
func (p *Process) Mappings() (maps []Mapping, bad int, err error) {
	f, err := os.Open(p.path("maps"))
	if err != nil {
		if cerr := p.Check(); cerr != nil {
			return nil, 0, cerr
		}
		return nil, 0, wrapProcErr(p.PID, "maps", err)
	}
	maps, bad, err = ParseMaps(f)
	f.Close()
	if testHookAfterRead != nil {
		testHookAfterRead(p.PID)
	}
	// A process that exits mid-read yields a short read or ESRCH; one
	// whose PID was reused yields another process's maps. Either way the
	// identity check says so.
	if cerr := p.Check(); cerr != nil {
		return nil, 0, cerr
	}
	if err != nil {
		return nil, 0, wrapProcErr(p.PID, "maps", err)
	}
	return maps, bad, nil
}

// changed is ErrProcessChanged for the process started at tick start.
func (p *Process) changed(start uint64) error {
	return &processError{pid: p.PID, kind: ErrProcessChanged,
		detail: fmt.Sprintf("started at tick %d, the one opened at tick %d", start, p.StartTime)}
}

func (p *Process) gone(detail string) error {
	return &processError{pid: p.PID, kind: ErrProcessGone, detail: detail}
}

// readStart reads the start time and whether the process is a zombie
// (or dead) from /proc/PID/stat. It allocates nothing unless it fails:
// Check runs it after every lookup of a live process (symbolize's
// SymbolizeInto).
func readStart(pid int) (start uint64, zombie bool, err error) {
	// procRoot + "/" + pid + "/stat", NUL-terminated, on the stack.
	var path [64]byte
	n := copy(path[:], procRoot)
	path[n] = '/'
	n++
	n += len(strconv.AppendInt(path[n:n], int64(pid), 10))
	n += copy(path[n:], "/stat")
	if n >= len(path) {
		return 0, false, fmt.Errorf("stat of pid %d: path too long", pid)
	}
	path[n] = 0
	cwd := unix.AT_FDCWD // a variable: the constant is negative
	fd, _, errno := unix.Syscall6(unix.SYS_OPENAT, uintptr(cwd), uintptr(unsafe.Pointer(&path[0])),
		uintptr(unix.O_RDONLY|unix.O_CLOEXEC), 0, 0, 0)
	if errno != 0 {
		return 0, false, &fs.PathError{Op: "open", Path: string(path[:n]), Err: errno}
	}
	var buf [1024]byte
	got, _, errno := unix.Syscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)))
	unix.Close(int(fd))
	if errno != 0 {
		return 0, false, &fs.PathError{Op: "read", Path: string(path[:n]), Err: errno}
	}
	start, state, ok := parseStatStart(buf[:got])
	if !ok {
		return 0, false, fmt.Errorf("%s: unexpected content %q", string(path[:n]), string(buf[:got]))
	}
	return start, state == 'Z' || state == 'X', nil
}

// parseStatStart takes the state (field 3) and the start time (field
// 22) from the text of /proc/PID/stat, after the command name's closing
// parenthesis (the name may hold spaces and parentheses itself).
func parseStatStart(b []byte) (start uint64, state byte, ok bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+3 >= len(b) {
		return 0, 0, false
	}
	state = b[i+2]
	// Fields from 3 on, one space apart: the start time is the 20th.
	f := b[i+2:]
	for k := 0; k < 19; k++ {
		j := bytes.IndexByte(f, ' ')
		if j < 0 {
			return 0, 0, false
		}
		f = f[j+1:]
	}
	for _, c := range f {
		if c < '0' || c > '9' {
			break
		}
		if start > (1<<64-1-9)/10 {
			return 0, 0, false
		}
		start = start*10 + uint64(c-'0')
		ok = true
	}
	return start, state, ok
}

// ParentPID is the PID of pid's parent, from /proc/PID/stat.
func ParentPID(pid int) (int, error) {
	st, err := readStat(pid)
	if err != nil {
		return 0, err
	}
	return st.PPID, nil
}

// readStat reads /proc/PID/stat.
func readStat(pid int) (procfs.ProcStat, error) {
	pfs, err := procFS()
	if err != nil {
		return procfs.ProcStat{}, err
	}
	proc, err := pfs.Proc(pid)
	if err != nil {
		return procfs.ProcStat{}, err
	}
	return proc.Stat()
}

// processError is ErrProcessGone or ErrProcessChanged for one PID.
type processError struct {
	pid    int
	kind   error
	detail string
}

func (e *processError) Error() string {
	return fmt.Sprintf("pid %d: %v: %s", e.pid, e.kind, e.detail)
}

// Is makes a gone process match os.ErrNotExist too, as the /proc error it
// replaces would.
func (e *processError) Is(target error) bool {
	return target == e.kind || (e.kind == ErrProcessGone && target == fs.ErrNotExist)
}

// wrapProcErr turns an error reading /proc/PID/what into ErrProcessGone
// when the process does not exist, and adds the remedy to a permission
// error.
func wrapProcErr(pid int, what string, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH):
		return &processError{pid: pid, kind: ErrProcessGone,
			detail: fmt.Sprintf("no such process (reading %s: %v)", what, err)}
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("pid %d: read %s: %w (run as root, or with CAP_SYS_PTRACE for another user's process)", pid, what, err)
	}
	return fmt.Errorf("pid %d: read %s: %w", pid, what, err)
}

// pfKthread is PF_KTHREAD, the kernel thread bit of the flags in field 9
// of /proc/PID/stat (include/linux/sched.h).
const pfKthread = 0x00200000

// KernelThread reports whether p is a kernel thread, which has no user
// space: no probe of it ever fires.
func (p *Process) KernelThread() (bool, error) {
	st, err := readStat(p.PID)
	if err != nil {
		return false, wrapProcErr(p.PID, "stat", err)
	}
	if st.Starttime != p.StartTime {
		return false, p.changed(st.Starttime)
	}
	return st.Flags&pfKthread != 0, nil
}
