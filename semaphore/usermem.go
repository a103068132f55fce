package semaphore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"

	"github.com/probekit/probekit/procmaps"
	"golang.org/x/sys/unix"
)

// The user-space fallback writes the counter through /proc/PID/mem, as bcc
// does. It is the second choice: it needs a PID, misses
// processes started later, and a tracer that dies without releasing
// leaves the probe enabled (the program only pays for computing the
// arguments). The kernel's ref_ctr_offset has none of these problems.
//
// The read-modify-write is not atomic with respect to other writers: a
// second tracer doing the same at the same instant can lose an update.
// Our own writers are serialised by the registry's lock.

// Registry counts the activations this process holds, per process
// identity and address. Its zero value is ready; it is safe for
// concurrent use. Activate and Held use a package-level registry.
type Registry struct {
	mu   sync.Mutex
	held map[key]int
}

type key struct {
	pid   int
	start uint64
	addr  uint64
}

var defaultRegistry Registry

// Activation is one raise of a semaphore; Release undoes it.
type Activation struct {
	reg  *Registry
	key  key
	proc procmaps.Process
	addr uint64
	site Site // the memory raised, compared before the release writes
	once sync.Once
	err  error
}

// Activate raises the 2-byte semaphore counter at runtime address addr in
// proc by one, through /proc/PID/mem, and returns the activation that
// lowers it again. Every activation counts: two give 2. Compute addr
// with procmaps (Object.Address(off, procmaps.Write) or
// Process.Address). It is recorded in the package-level registry.
func Activate(proc *procmaps.Process, addr uint64) (*Activation, error) {
	return defaultRegistry.Activate(proc, addr)
}

// Held returns how many activations of the semaphore at addr in proc the
// package-level registry holds.
func Held(proc *procmaps.Process, addr uint64) int { return defaultRegistry.Held(proc, addr) }

// Outstanding returns how many activations the package-level registry
// holds in all: 0 once every activation was released.
func Outstanding() int { return defaultRegistry.Outstanding() }

// Activate is the package-level Activate on r.
func (r *Registry) Activate(proc *procmaps.Process, addr uint64) (*Activation, error) {
	if proc == nil {
		return nil, errors.New("semaphore: nil process (the user-space fallback needs a PID)")
	}
	if addr%2 != 0 {
		return nil, fmt.Errorf("semaphore at %#x in %v: %w", addr, proc, ErrMisaligned)
	}
	site, err := SiteOf(proc, addr)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := adjust(proc, addr, +1, site); err != nil {
		return nil, err
	}
	if r.held == nil {
		r.held = make(map[key]int)
	}
	k := key{proc.PID, proc.StartTime, addr}
	r.held[k]++
	return &Activation{reg: r, key: k, proc: *proc, addr: addr, site: site}, nil
}

// Held returns how many activations of the semaphore at addr in proc r
// holds.
func (r *Registry) Held(proc *procmaps.Process, addr uint64) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.held[key{proc.PID, proc.StartTime, addr}]
}

// Outstanding returns how many activations r holds in all.
func (r *Registry) Outstanding() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.held {
		n += c
	}
	return n
}

// Process is the process the activation was made in.
func (a *Activation) Process() procmaps.Process { return a.proc }

// Address is the counter's runtime address.
func (a *Activation) Address() uint64 { return a.addr }

// Release lowers the counter by one, once: later calls return the first
// call's result. A process that has exited (or whose PID now belongs to
// another process, which is never written to) is not an error, nor is
// memory that changed since Activate (the object dlclose'd, the address
// reused, the process exec'd: see Site), which is not written either.
func (a *Activation) Release() error {
	a.once.Do(func() { a.err = a.reg.release(a) })
	return a.err
}

func (r *Registry) release(a *Activation) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.held[a.key]--; r.held[a.key] <= 0 {
		delete(r.held, a.key)
	}
	err := adjust(&a.proc, a.addr, -1, a.site)
	if errors.Is(err, procmaps.ErrProcessGone) || errors.Is(err, procmaps.ErrProcessChanged) || errors.Is(err, ErrSiteChanged) {
		return nil // the memory raised is gone
	}
	return err
}

// adjust adds delta (+1 or -1) to the counter at addr in proc, whose
// memory must still be site (an address outside the process's writable
// mappings is refused by SiteOf before: a wrong address would corrupt
// the target, oxidecomputer/usdt#449).
func adjust(proc *procmaps.Process, addr uint64, delta int, site Site) error {
	if addr > math.MaxInt64-2 {
		return fmt.Errorf("semaphore at %#x in %v: %w", addr, proc, ErrNotWritable)
	}
	fd, path, err := openMem(proc, unix.O_RDWR)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	// After opening the memory: the descriptor holds the image that
	// the check sees.
	if err := checkSite(proc, addr, site); err != nil {
		return err
	}
	v, err := readCounter(proc, fd, path, addr)
	if err != nil {
		return err
	}
	switch {
	case delta > 0 && v == math.MaxUint16:
		return fmt.Errorf("semaphore at %#x in %v: %w", addr, proc, ErrOverflow)
	case delta < 0 && v == 0:
		return fmt.Errorf("semaphore at %#x in %v: %w (another tracer or the program lowered it)", addr, proc, ErrUnbalanced)
	}
	return writeCounter(proc, fd, path, addr, uint16(int(v)+delta))
}

// writeCounter writes v to the counter at addr through fd, proc's open
// memory.
func writeCounter(proc *procmaps.Process, fd int, path string, addr uint64, v uint16) error {
	var b [2]byte
	binary.NativeEndian.PutUint16(b[:], v)
	n, err := unix.Pwrite(fd, b[:], int64(addr))
	if err == nil && n != len(b) {
		err = unix.EIO
	}
	if err != nil {
		return ioError(proc, "write", path, addr, err)
	}
	return nil
}

// openMem opens /proc/PID/mem of proc with flags (O_RDONLY, O_RDWR).
func openMem(proc *procmaps.Process, flags int) (int, string, error) {
	path := "/proc/" + strconv.Itoa(proc.PID) + "/mem"
	fd, err := unix.Open(path, flags|unix.O_CLOEXEC, 0)
	if err != nil {
		if cerr := proc.Check(); cerr != nil {
			return -1, path, fmt.Errorf("semaphore: %w", cerr)
		}
		return -1, path, memError(proc, "open", path, err)
	}
	// The descriptor holds the memory of whoever had the PID when it was
	// opened; the process was ours if it still is now.
	if err := proc.Check(); err != nil {
		unix.Close(fd)
		return -1, path, fmt.Errorf("semaphore: %w", err)
	}
	return fd, path, nil
}

// readCounter reads the counter at addr from fd, proc's open memory.
func readCounter(proc *procmaps.Process, fd int, path string, addr uint64) (uint16, error) {
	var b [2]byte
	// pread/pwrite directly: os.File.WriteAt would loop forever on the
	// 0-byte result /proc/PID/mem gives once the process's memory is gone.
	n, err := unix.Pread(fd, b[:], int64(addr))
	if err == nil && n != len(b) {
		err = unix.EIO
	}
	if err != nil {
		return 0, ioError(proc, "read", path, addr, err)
	}
	// The target runs on this machine, so the counter has our byte order.
	return binary.NativeEndian.Uint16(b[:]), nil
}

// ioError explains a failed read or write of the counter: the process
// exiting under us, or an address it does not map.
func ioError(proc *procmaps.Process, op, path string, addr uint64, err error) error {
	if cerr := proc.Check(); cerr != nil {
		return fmt.Errorf("semaphore: %w", cerr)
	}
	return fmt.Errorf("semaphore: %s %s at %#x: %w", op, path, addr, err)
}

// memError adds the remedy to an error opening /proc/PID/mem.
func memError(proc *procmaps.Process, op, path string, err error) error {
	if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
		return fmt.Errorf("semaphore: %s %s: %w (writing another process's memory needs root, or CAP_SYS_PTRACE and ptrace access to pid %d: see kernel.yama.ptrace_scope)",
			op, path, err, proc.PID)
	}
	return fmt.Errorf("semaphore: %s %s: %w", op, path, err)
}

// RestoreForDetach prepares the counter at addr in proc, raised by the
// kernel for a ref_ctr_offset uprobe that is about to detach: if it reads
// 0, it is set to 1, and restored is true. The kernel lowers the counter
// of every process it raised as the uprobe goes; finding 0 there it
// refuses, logs "ref_ctr going negative" and keeps the uprobe on the file
// for good, after which every attach at that site with another semaphore
// offset (or none) fails with EINVAL until the file's inode goes (Linux
// 6.18, kernel/events/uprobes.c's __update_ref_ctr). A 0 under an
// attached probe means a user-space writer erased the kernel's raise (bcc
// and this package's fallback read and write the counter, which is not
// atomic with the kernel's update). A process that has exited, or whose
// PID names another process now, is left alone.
//
// It checks only that addr lies in a writable mapping; RestoreSite also
// checks the memory is the one the kernel raised.
func RestoreForDetach(proc *procmaps.Process, addr uint64) (restored bool, err error) {
	if proc == nil || addr%2 != 0 || addr > math.MaxInt64-2 {
		return false, fmt.Errorf("semaphore at %#x: %w", addr, ErrMisaligned)
	}
	site, err := SiteOf(proc, addr)
	if err != nil {
		return false, err
	}
	return RestoreSite(proc, addr, site)
}

// RestoreSite is RestoreForDetach for the counter whose memory was site
// (SiteOf, taken when the uprobe was attached): memory that changed
// since (the object dlclose'd, the process exec'd) is not written, and
// the error is ErrSiteChanged.
func RestoreSite(proc *procmaps.Process, addr uint64, site Site) (restored bool, err error) {
	if proc == nil || addr%2 != 0 || addr > math.MaxInt64-2 {
		return false, fmt.Errorf("semaphore at %#x: %w", addr, ErrMisaligned)
	}
	defaultRegistry.mu.Lock() // no fallback writer of ours runs meanwhile
	defer defaultRegistry.mu.Unlock()
	fd, path, err := openMem(proc, unix.O_RDWR)
	if err != nil {
		return false, err
	}
	defer unix.Close(fd)
	if err := checkSite(proc, addr, site); err != nil {
		return false, err
	}
	v, err := readCounter(proc, fd, path, addr)
	if err != nil || v != 0 {
		return false, err
	}
	if err := writeCounter(proc, fd, path, addr, 1); err != nil {
		return false, err
	}
	return true, nil
}
