package procmaps

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"syscall"
)

// maxFindWorkers bounds the goroutines FindProcesses reads maps with: the
// cost is the kernel formatting maps text (d_path per line), which scales
// with CPUs, and more readers than CPUs only contend.
const maxFindWorkers = 8

// FindPIDs returns the PIDs of the processes that map the file at path
// (as seen from our mount namespace), matched by device and inode, not
// by name: a container that names the file differently is found, a
// different file with the same name is not. unreadable counts the
// processes whose maps could not be read, which may map it too. See
// FindProcesses.
func FindPIDs(path string) (pids []int, unreadable int, err error) {
	id, err := IDOf(path)
	if err != nil {
		return nil, 0, err
	}
	procs, unreadable, err := FindProcesses(id)
	if err != nil {
		return nil, 0, err
	}
	pids = make([]int, len(procs))
	for i, p := range procs {
		pids[i] = p.PID
	}
	return pids, unreadable, nil
}

// FindProcesses returns the processes that map file id, in PID order,
// each with its identity (read after its maps, so it is the process whose
// maps matched). Processes that exit during the scan are left out.
// unreadable counts those whose maps could not be read (another user's,
// when not root: EACCES), which may map the file too: a caller that
// needs every user of the file says the answer is incomplete.
func FindProcesses(id FileID) (procs []Process, unreadable int, err error) {
	pids, err := listPIDs()
	if err != nil {
		return nil, 0, err
	}
	workers := min(runtime.GOMAXPROCS(0), maxFindWorkers, max(len(pids), 1))
	var (
		mu    sync.Mutex
		found []Process
		wg    sync.WaitGroup
		next  = make(chan int)
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf []byte
			for pid := range next {
				var (
					ok  bool
					err error
				)
				buf, ok, err = mapsFile(pid, buf, id)
				if err != nil && !gone(err) {
					mu.Lock()
					unreadable++
					mu.Unlock()
				}
				if !ok {
					continue
				}
				start, zombie, err := readStart(pid)
				if err != nil || zombie {
					continue
				}
				mu.Lock()
				found = append(found, Process{PID: pid, StartTime: start})
				mu.Unlock()
			}
		}()
	}
	for _, pid := range pids {
		next <- pid
	}
	close(next)
	wg.Wait()
	slices.SortFunc(found, func(a, b Process) int { return a.PID - b.PID })
	return found, unreadable, nil
}

// gone reports whether err is what reading a process that has exited
// gives: its /proc directory is gone (ENOENT), or its task is (ESRCH).
func gone(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH)
}

// listPIDs lists the numeric entries of /proc (processes, not threads:
// threads share their process's maps).
func listPIDs() ([]int, error) {
	d, err := os.Open(procRoot)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	pids := make([]int, 0, len(names))
	for _, n := range names {
		if pid, err := strconv.Atoi(n); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// mapsFile reads /proc/PID/maps into buf and reports whether a line maps
// file id, or why the maps could not be read. Lines that do not contain
// the inode's digits are not parsed.
func mapsFile(pid int, buf []byte, id FileID) ([]byte, bool, error) {
	f, err := os.Open(procRoot + "/" + strconv.Itoa(pid) + "/maps")
	if err != nil {
		return buf, false, err
	}
	buf, err = readAll(f, buf[:0])
	f.Close()
	if err != nil {
		return buf, false, err
	}
	var digits [20]byte
	inode := strconv.AppendUint(digits[:0], id.Inode, 10)
	for rest := buf; len(rest) > 0; {
		line := rest
		if i := bytes.IndexByte(rest, '\n'); i >= 0 {
			line, rest = rest[:i], rest[i+1:]
		} else {
			rest = nil
		}
		if !bytes.Contains(line, inode) {
			continue
		}
		if m, _, err := parseHeader(string(line)); err == nil && m.Inode == id.Inode && m.Dev == id.Dev {
			return buf, true, nil
		}
	}
	return buf, false, nil
}

// readAll is io.ReadAll into a reused buffer.
func readAll(r io.Reader, buf []byte) ([]byte, error) {
	if cap(buf) < 4096 {
		buf = make([]byte, 0, 16384)
	}
	for {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, cap(buf))
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}
