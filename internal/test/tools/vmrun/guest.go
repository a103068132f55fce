package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The guest side: this same static binary is the initramfs's /init. As
// PID 1 it loads the modules, mounts the host's root (9p, read-only) with
// writable tmpfs and overlay places, chroots into it and starts itself
// again as the worker, which runs the test binaries the job names. PID 1
// reaps every orphan until the worker exits, then powers off.

const (
	workerEnv = "VMRUN_WORKER"
	outMount  = "/run/vmrun" // the result share, inside the new root
	newRoot   = "/newroot"
)

// job is what the host asks the guest to run (job.json in the result
// share).
type job struct {
	Kernel   string
	Env      []string
	Packages []jobPackage
}

type jobPackage struct {
	Name   string // file-name form of the import path: "usdt_bpf"
	Import string
	Dir    string // the package directory: tests run there
	Binary string // the test binary, a host path
	Args   []string
}

// result is one package's outcome (results.json, rewritten after each).
type result struct {
	Name     string
	Exit     int
	Seconds  float64
	Error    string `json:",omitempty"`
	Finished bool
}

func guestMain() {
	if os.Getenv(workerEnv) == "1" {
		if err := worker(); err != nil {
			fmt.Fprintln(os.Stderr, "vmrun worker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if err := initSetup(); err != nil {
		fmt.Fprintln(os.Stderr, "vmrun init:", err)
		poweroff()
	}
	cmd := exec.Command("/proc/self/exe")
	cmd.Env = append(os.Environ(), workerEnv+"=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "vmrun init: worker:", err)
		poweroff()
	}
	// Reap every child; the worker's exit ends the run.
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil || pid == cmd.Process.Pid {
			break
		}
	}
	poweroff()
}

func poweroff() {
	unix.Sync()
	unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	select {}
}

type mnt struct {
	src, target, fstype string
	flags               uintptr
	data                string
}

func initSetup() error {
	os.MkdirAll("/dev", 0o755)
	os.MkdirAll("/proc", 0o755)
	if err := unix.Mount("devtmpfs", "/dev", "devtmpfs", 0, ""); err != nil {
		return fmt.Errorf("mount /dev: %w", err)
	}
	if err := unix.Mount("proc", "/proc", "proc", 0, ""); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	order, err := os.ReadFile("/modules/order")
	if err != nil {
		return err
	}
	for _, m := range strings.Fields(string(order)) {
		if err := loadModule(filepath.Join("/modules", m)); err != nil {
			return err
		}
	}
	const p9 = "trans=virtio,version=9p2000.L,msize=262144"
	os.MkdirAll(newRoot, 0o755)
	os.MkdirAll("/ovl", 0o755)
	// cache=loose: with cache=none every lookup makes a new inode, and a
	// uprobe attached by path can miss the inode that is mapped.
	mounts := []mnt{
		{"root", newRoot, "9p", unix.MS_RDONLY, p9 + ",cache=loose"},
		{"tmpfs", "/ovl", "tmpfs", 0, "mode=0755"},
	}
	if err := mountAll(mounts); err != nil {
		return err
	}
	// A checkout under /tmp (a CI runner's work directory) would vanish
	// under the guest's own /tmp, and test binaries under /root (the
	// default result directory, in the user's cache) would be seen
	// through the overlay, whose device is not the one /proc/PID/maps
	// names for a mapped file (procmaps refuses such a file as "not the
	// mapped file"): the host names them on the command line
	// (vmrun.keep=DIR,DIR), and a bind of each is set aside now and
	// moved back over the tmpfs or overlay below, with the 9p inodes the
	// host's paths have.
	var keeps []string
	if v := cmdlineValue("vmrun.keep"); v != "" {
		keeps = strings.Split(v, ",")
	}
	for i, keep := range keeps {
		aside := fmt.Sprintf("/ovl/keep%d", i)
		os.MkdirAll(aside, 0o755)
		if err := unix.Mount(newRoot+keep, aside, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s: %w", keep, err)
		}
	}
	mounts = nil
	for _, d := range []string{"var", "root"} {
		up, work := "/ovl/"+d+"/up", "/ovl/"+d+"/work"
		os.MkdirAll(up, 0o755)
		os.MkdirAll(work, 0o755)
		mounts = append(mounts, mnt{"overlay", newRoot + "/" + d, "overlay", 0,
			"lowerdir=" + newRoot + "/" + d + ",upperdir=" + up + ",workdir=" + work})
	}
	mounts = append(mounts,
		mnt{"tmpfs", newRoot + "/tmp", "tmpfs", 0, "mode=1777"},
		mnt{"tmpfs", newRoot + "/run", "tmpfs", 0, "mode=0755"},
		mnt{"proc", newRoot + "/proc", "proc", 0, ""},
		mnt{"sysfs", newRoot + "/sys", "sysfs", 0, ""},
		mnt{"devtmpfs", newRoot + "/dev", "devtmpfs", 0, ""},
		mnt{"devpts", newRoot + "/dev/pts", "devpts", 0, "ptmxmode=0666"},
		mnt{"tmpfs", newRoot + "/dev/shm", "tmpfs", 0, "mode=1777"},
		mnt{"debugfs", newRoot + "/sys/kernel/debug", "debugfs", 0, ""},
		mnt{"tracefs", newRoot + "/sys/kernel/tracing", "tracefs", 0, ""},
		mnt{"bpf", newRoot + "/sys/fs/bpf", "bpf", 0, "mode=0700"},
		mnt{"cgroup2", newRoot + "/sys/fs/cgroup", "cgroup2", 0, ""},
		mnt{"out", newRoot + outMount, "9p", 0, p9 + ",cache=none"},
	)
	if err := mountAll(mounts); err != nil {
		return err
	}
	for i, keep := range keeps {
		if err := os.MkdirAll(newRoot+keep, 0o755); err != nil {
			return err
		}
		if err := unix.Mount(fmt.Sprintf("/ovl/keep%d", i), newRoot+keep, "", unix.MS_MOVE, ""); err != nil {
			return fmt.Errorf("move %s back: %w", keep, err)
		}
	}
	// The new root becomes the mount namespace's root (as switch_root
	// does), not only this process's: /proc/PID/root then reads "/" and
	// paths under it are the host's paths.
	if err := os.Chdir(newRoot); err != nil {
		return err
	}
	if err := unix.Mount(".", "/", "", unix.MS_MOVE, ""); err != nil {
		return fmt.Errorf("move %s to /: %w", newRoot, err)
	}
	if err := unix.Chroot("."); err != nil {
		return err
	}
	if err := os.Chdir("/"); err != nil {
		return err
	}
	// Before 5.11, BPF maps are charged to RLIMIT_MEMLOCK.
	inf := &unix.Rlimit{Cur: unix.RLIM_INFINITY, Max: unix.RLIM_INFINITY}
	if err := unix.Setrlimit(unix.RLIMIT_MEMLOCK, inf); err != nil {
		return err
	}
	unix.Sethostname([]byte("vmrun"))
	return loopbackUp()
}

func mountAll(ms []mnt) error {
	for _, m := range ms {
		if err := os.MkdirAll(m.target, 0o755); err != nil && !os.IsExist(err) {
			// A read-only root has the mount points already.
			if _, serr := os.Stat(m.target); serr != nil {
				return err
			}
		}
		if err := unix.Mount(m.src, m.target, m.fstype, m.flags, m.data); err != nil {
			return fmt.Errorf("mount %s on %s (%s): %w", m.src, m.target, m.fstype, err)
		}
	}
	return nil
}

func loadModule(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	err = unix.FinitModule(int(f.Fd()), "", 0)
	if err != nil && err != unix.EEXIST {
		return fmt.Errorf("load %s: %w", path, err)
	}
	return nil
}

func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("lo flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("lo up: %w", err)
	}
	return nil
}

func worker() error {
	b, err := os.ReadFile(filepath.Join(outMount, "job.json"))
	if err != nil {
		return err
	}
	var j job
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	var uts unix.Utsname
	unix.Uname(&uts)
	fmt.Printf("vmrun: guest kernel %s, %d packages\n", unix.ByteSliceToString(uts.Release[:]), len(j.Packages))
	var results []result
	save := func() error {
		b, err := json.MarshalIndent(results, "", "  ")
		if err != nil {
			return err
		}
		tmp := filepath.Join(outMount, "results.json.tmp")
		if err := os.WriteFile(tmp, b, 0o644); err != nil {
			return err
		}
		return os.Rename(tmp, filepath.Join(outMount, "results.json"))
	}
	for _, p := range j.Packages {
		r := runPackage(j, p)
		results = append(results, r)
		fmt.Printf("vmrun: %-40s exit %d  %.0fs %s\n", p.Import, r.Exit, r.Seconds, r.Error)
		if err := save(); err != nil {
			return err
		}
	}
	return nil
}

func runPackage(j job, p jobPackage) result {
	r := result{Name: p.Name}
	log, err := os.Create(filepath.Join(outMount, p.Name+".log"))
	if err != nil {
		r.Exit, r.Error = -1, err.Error()
		return r
	}
	defer log.Close()
	cmd := exec.Command(p.Binary, p.Args...)
	cmd.Dir = p.Dir
	cmd.Env = j.Env
	cmd.Stdout, cmd.Stderr = log, log
	// Its own process group, so that what a test leaves behind can be
	// killed with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	start := time.Now()
	err = cmd.Run()
	r.Seconds = time.Since(start).Seconds()
	if cmd.Process != nil {
		unix.Kill(-cmd.Process.Pid, unix.SIGKILL)
	}
	r.Finished = true
	if err != nil {
		r.Exit = -1
		if ee, ok := err.(*exec.ExitError); ok {
			r.Exit = ee.ExitCode()
		} else {
			r.Error = err.Error()
		}
	}
	return r
}

// cmdlineValue returns the value of key=VALUE on the kernel command line.
func cmdlineValue(key string) string {
	b, _ := os.ReadFile("/proc/cmdline")
	for _, f := range strings.Fields(string(b)) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return v
		}
	}
	return ""
}
