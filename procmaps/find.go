package procmaps

import (
	"bytes"
	"errors"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
)

// maxFindWorkers bounds the goroutines FindProcesses reads maps with: the
// cost is the kernel formatting maps text (d_path per line), which scales
// with CPUs, and more readers than CPUs only contend.
const maxFindWorkers = 8

// FindPIDs returns the PIDs of the processes that map the file at path
// (as seen from our mount namespace), matched by device and inode, not
// by name: a container that names the file differently is found, a
// different file with the same name is not. See FindProcesses.
func FindPIDs(path string) ([]int, error) {
	id, err := IDOf(path)
	if err != nil {
		return nil, err
	}
	procs, err := FindProcesses(id)
	if err != nil {
		return nil, err
	}
	pids := make([]int, len(procs))
	for i, p := range procs {
		pids[i] = p.PID
	}
	return pids, nil
}

// FindProcesses returns the processes that map file id, in PID order,
// each with its identity (read after its maps, so it is the process whose
// maps matched). Processes that exit during the scan, and those whose
// maps we may not read (another user's, when not root), are left out.
func FindProcesses(id FileID) ([]Process, error) {
	pids, err := listPIDs()
	if err != nil {
		return nil, err
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
				var ok bool
				buf, ok = mapsFile(pid, buf, id)
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
	return found, nil
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
// file id. Lines that do not contain the inode's digits are not parsed.
func mapsFile(pid int, buf []byte, id FileID) ([]byte, bool) {
	f, err := os.Open(procRoot + "/" + strconv.Itoa(pid) + "/maps")
	if err != nil {
		return buf, false
	}
	buf, err = readAll(f, buf[:0])
	f.Close()
	if err != nil {
		return buf, false
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
			return buf, true
		}
	}
	return buf, false
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
