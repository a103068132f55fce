package privilege

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

func TestNeedRules(t *testing.T) {
	v618, v510, v54 := Version{6, 18}, Version{5, 10}, Version{5, 4}
	for _, c := range []struct {
		name    string
		m       machine
		works   []Work
		missing []Cap // nil: allowed
		grant   []Cap
	}{
		{"bpf+perfmon", machine{kernel: v618, effective: SetOf(CapBPF, CapPerfmon), yama: -1}, []Work{LoadBPF, LockMemory}, nil, nil},
		{"no perfmon", machine{kernel: v618, effective: SetOf(CapBPF), yama: -1}, []Work{LoadBPF, LockMemory}, []Cap{CapPerfmon}, []Cap{CapPerfmon, CapBPF}},
		{"none", machine{kernel: v618, yama: -1}, []Work{LoadBPF}, []Cap{CapPerfmon, CapBPF}, []Cap{CapPerfmon, CapBPF}},
		{"sys_admin on 5.8+", machine{kernel: v618, effective: SetOf(CapSysAdmin), yama: -1}, []Work{LoadBPF}, nil, nil},
		{"bpf+perfmon before 5.8", machine{kernel: v54, effective: SetOf(CapBPF, CapPerfmon), memlockUnlimited: true, yama: -1}, []Work{LoadBPF, LockMemory}, []Cap{CapSysAdmin}, []Cap{CapSysAdmin}},
		{"memlock before 5.11", machine{kernel: v510, effective: SetOf(CapBPF, CapPerfmon), yama: -1}, []Work{LoadBPF, LockMemory}, []Cap{CapSysResource}, []Cap{CapSysResource, CapPerfmon, CapBPF}},
		{"memlock unlimited before 5.11", machine{kernel: v510, effective: SetOf(CapBPF, CapPerfmon), memlockUnlimited: true, yama: -1}, []Work{LoadBPF, LockMemory}, nil, nil},
		{"memlock from 5.11", machine{kernel: Version{5, 11}, effective: SetOf(CapBPF, CapPerfmon), yama: -1}, []Work{LoadBPF, LockMemory}, nil, nil},
		{"other user", machine{kernel: v618, effective: SetOf(CapBPF, CapPerfmon), yama: -1}, []Work{LoadBPF, OtherUser}, []Cap{CapSysPtrace}, []Cap{CapSysPtrace, CapPerfmon, CapBPF}},
		{"launch without yama", machine{kernel: v618, effective: SetOf(CapBPF, CapPerfmon), yama: -1}, []Work{LoadBPF, LaunchTraced}, nil, nil},
		{"launch under yama 1", machine{kernel: v618, effective: SetOf(CapBPF, CapPerfmon), yama: 1}, []Work{LaunchTraced}, nil, nil},
		{"launch under yama 2", machine{kernel: v618, effective: SetOf(CapBPF, CapPerfmon), yama: 2}, []Work{LaunchTraced}, []Cap{CapSysPtrace}, []Cap{CapSysPtrace}},
		{"seize under yama 1", machine{kernel: v618, effective: SetOf(CapBPF, CapPerfmon), yama: 1}, []Work{AttachRunning}, []Cap{CapSysPtrace}, []Cap{CapSysPtrace}},
		{"debian 5.10 at paranoid 3", machine{kernel: v510, effective: SetOf(CapBPF, CapPerfmon), memlockUnlimited: true, yama: -1, paranoid: 3}, []Work{LoadBPF, LockMemory}, []Cap{CapSysAdmin}, []Cap{CapSysAdmin}},
		{"debian 6.1 at paranoid 3, sys_admin", machine{kernel: Version{6, 1}, effective: SetOf(CapSysAdmin), yama: -1, paranoid: 3}, []Work{LoadBPF, LockMemory}, nil, []Cap{CapSysAdmin}},
		{"debian 6.12 at paranoid 3", machine{kernel: Version{6, 12}, effective: SetOf(CapBPF, CapPerfmon), yama: -1, paranoid: 3}, []Work{LoadBPF, LockMemory}, nil, []Cap{CapPerfmon, CapBPF}},
		{"6.1 at paranoid 2", machine{kernel: Version{6, 1}, effective: SetOf(CapBPF, CapPerfmon), yama: -1, paranoid: 2}, []Work{LoadBPF, LockMemory}, nil, []Cap{CapPerfmon, CapBPF}},
		{"seize under yama 0", machine{kernel: v618, effective: SetOf(CapBPF, CapPerfmon), yama: 0}, []Work{AttachRunning}, nil, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.m.need("tracing", c.works, nil)
			if c.grant != nil && c.m.required(c.works) != SetOf(c.grant...) {
				t.Errorf("required %v, want %v", c.m.required(c.works), c.grant)
			}
			if c.missing == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var me *MissingError
			if !errors.As(err, &me) {
				t.Fatalf("got %v, want a *MissingError", err)
			}
			if !errors.Is(err, os.ErrPermission) {
				t.Errorf("%v does not wrap os.ErrPermission", err)
			}
			// The grant: what the works need, and what the process
			// holds of what probekit uses.
			grant := (SetOf(c.grant...) | c.m.effective&c.m.required(allWork)).Caps()
			if !sameCaps(me.Missing, c.missing) || !sameCaps(me.Grant, grant) {
				t.Fatalf("missing %v, grant %v; want %v, %v", me.Missing, me.Grant, c.missing, grant)
			}
			msg := err.Error()
			for _, want := range []string{
				"tracing lacks " + capList(c.missing) + ": it needs ",
				"grant " + capList(grant) + " with ",
				"setcap " + setcapList(grant) + "+ep ",
				"AmbientCapabilities=" + systemdList(grant),
				"securityContext.capabilities.add: [" + kubernetesList(grant) + "]",
			} {
				if !strings.Contains(msg, want) {
					t.Errorf("%q lacks %q", msg, want)
				}
			}
		})
	}
}

func sameCaps(a, b []Cap) bool {
	return SetOf(a...) == SetOf(b...) && len(a) == len(b)
}

// The spellings of the remedies, for one set.
func TestRemedySpellings(t *testing.T) {
	caps := []Cap{CapDACReadSearch, CapSysPtrace, CapPerfmon, CapBPF}
	if got := setcapList(caps); got != "cap_dac_read_search,cap_sys_ptrace,cap_perfmon,cap_bpf" {
		t.Errorf("setcap %q", got)
	}
	if got := systemdList(caps); got != "CAP_DAC_READ_SEARCH CAP_SYS_PTRACE CAP_PERFMON CAP_BPF" {
		t.Errorf("systemd %q", got)
	}
	if got := kubernetesList(caps); got != "DAC_READ_SEARCH, SYS_PTRACE, PERFMON, BPF" {
		t.Errorf("kubernetes %q", got)
	}
	if got := SetOf(caps...).String(); got != "CAP_DAC_READ_SEARCH, CAP_SYS_PTRACE, CAP_PERFMON, CAP_BPF" {
		t.Errorf("set %q", got)
	}
	if Set(0).String() != "none" || Cap(63).String() != "CAP_63" {
		t.Errorf("%q %q", Set(0), Cap(63))
	}
}

// capget's effective set is the one /proc/self/status shows.
func TestEffectiveIsCapEff(t *testing.T) {
	got, err := Effective()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			want, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			if got != Set(want) {
				t.Fatalf("capget %#x, CapEff %#x", got, want)
			}
			return
		}
	}
	t.Fatal("no CapEff in /proc/self/status")
}

func TestParseRelease(t *testing.T) {
	for s, want := range map[string]Version{
		"5.10.0-32-amd64":       {5, 10},
		"6.18":                  {6, 18},
		"6.12.117+deb13-amd64":  {6, 12},
		"4.19-rc1":              {4, 19},
		"5.8.0-1000-gcp+custom": {5, 8},
	} {
		if got, err := parseRelease(s); err != nil || got != want {
			t.Errorf("%q: %v, %v; want %v", s, got, err, want)
		}
	}
	for _, s := range []string{"", "6", "x.y", "99999999.1"} {
		if _, err := parseRelease(s); err == nil {
			t.Errorf("%q parsed", s)
		}
	}
	if !(Version{5, 10}).Less(linux511) || (Version{6, 1}).Less(linux58) || !(Version{4, 19}).Less(linux58) {
		t.Error("Less")
	}
}

func TestStatusIDs(t *testing.T) {
	status := []byte("Name:\tloop\nUid:\t1000\t1000\t1000\t1000\nGid:\t100\t100\t0\t100\n")
	if !statusIDs(status, "Uid:", 1000) {
		t.Error("uid 1000 not matched")
	}
	if statusIDs(status, "Uid:", 0) {
		t.Error("uid 0 matched")
	}
	// A saved gid of another: the kernel asks for CAP_SYS_PTRACE.
	if statusIDs(status, "Gid:", 100) {
		t.Error("gid with another saved gid matched")
	}
	if statusIDs([]byte("Uid:\t1000\n"), "Uid:", 1000) || statusIDs(nil, "Uid:", 0) {
		t.Error("a short or missing line matched")
	}
}

// OfProcess of one's own process needs nothing; of another user's
// (pid 1 is root's), OtherUser when not running as root.
func TestOfProcess(t *testing.T) {
	if w := OfProcess(os.Getpid()); len(w) != 0 {
		t.Errorf("own process: %v", w)
	}
	dir := t.TempDir()
	procDir = dir
	defer func() { procDir = "/proc" }()
	if err := os.MkdirAll(filepath.Join(dir, "42"), 0o755); err != nil {
		t.Fatal(err)
	}
	uid, gid := os.Geteuid(), os.Getegid()
	write := func(u, g int) {
		s := "Uid:\t" + strings.Repeat(strconv.Itoa(u)+"\t", 4) + "\nGid:\t" + strings.Repeat(strconv.Itoa(g)+"\t", 4) + "\n"
		if err := os.WriteFile(filepath.Join(dir, "42", "status"), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(uid, gid)
	if w := OfProcess(42); len(w) != 0 {
		t.Errorf("same ids: %v", w)
	}
	write(uid+1, gid)
	if w := OfProcess(42); len(w) != 1 || w[0] != OtherUser {
		t.Errorf("another uid: %v", w)
	}
	write(uid, gid+1)
	if w := OfProcess(42); len(w) != 1 || w[0] != OtherUser {
		t.Errorf("another gid: %v", w)
	}
	if w := OfProcess(43); len(w) != 0 {
		t.Errorf("no status: %v", w)
	}
}

// writeSysctls makes procSys a directory with these values.
func writeSysctls(t *testing.T, values map[string]int) {
	dir := t.TempDir()
	procSys = dir
	t.Cleanup(func() { procSys = "/proc/sys" })
	for name, v := range values {
		p := filepath.Join(dir, strings.ReplaceAll(name, ".", "/"))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(strconv.Itoa(v)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestExplainFiles(t *testing.T) {
	denied := &fs.PathError{Op: "open", Path: "/srv/app/bin/server", Err: syscall.EACCES}
	err := on(SetOf(CapBPF, CapPerfmon)).explain("tracing", denied)
	var me *MissingError
	if !errors.As(err, &me) || !sameCaps(me.Missing, []Cap{CapDACReadSearch}) || !errors.Is(err, syscall.EACCES) {
		t.Fatalf("%v: want the missing CAP_DAC_READ_SEARCH, wrapping EACCES", err)
	}
	if !strings.Contains(err.Error(), "/srv/app/bin/server") || !strings.Contains(err.Error(), "setcap cap_dac_read_search,cap_perfmon,cap_bpf+ep") {
		t.Errorf("%q does not name the file and the remedy", err)
	}
	proc := &fs.PathError{Op: "open", Path: "/proc/1/maps", Err: syscall.EACCES}
	if err := on(SetOf(CapBPF, CapPerfmon)).explain("tracing", proc); !errors.As(err, &me) || !sameCaps(me.Missing, []Cap{CapSysPtrace}) {
		t.Fatalf("%v: want the missing CAP_SYS_PTRACE", err)
	}
	// A file in a process's root: the link needs CAP_SYS_PTRACE, the
	// file then CAP_DAC_READ_SEARCH.
	inRoot := &fs.PathError{Op: "openat2", Path: "/proc/42/root/srv/app", Err: syscall.EACCES}
	if err := on(SetOf(CapBPF, CapPerfmon)).explain("tracing", inRoot); !errors.As(err, &me) || !sameCaps(me.Missing, []Cap{CapSysPtrace}) {
		t.Fatalf("%v: want the missing CAP_SYS_PTRACE", err)
	}
	if err := on(SetOf(CapSysPtrace)).explain("tracing", inRoot); !errors.As(err, &me) || !sameCaps(me.Missing, []Cap{CapDACReadSearch}) {
		t.Fatalf("%v: want the missing CAP_DAC_READ_SEARCH", err)
	}
	for path, want := range map[string][2]bool{
		"/proc/42/maps": {true, false}, "/proc/self/root/x": {true, true}, "/proc/42/cwd/a/b": {true, true},
		"/proc/42/root": {true, false}, "/proc/sys/kernel/x": {false, false}, "/procx/1/root/a": {false, false}, "/srv/proc/1/root/a": {false, false},
	} {
		if a, b := procPath(path); [2]bool{a, b} != want {
			t.Errorf("procPath(%q) = %v, %v; want %v", path, a, b, want)
		}
	}
	// Held, yet refused: the sysctls are asked.
	writeSysctls(t, map[string]int{"kernel.perf_event_paranoid": 2})
	var re *RefusedError
	if err := on(SetOf(CapDACReadSearch)).explain("tracing", denied); !errors.As(err, &re) || !errors.Is(err, syscall.EACCES) {
		t.Fatalf("%v: want a *RefusedError", err)
	}
}

func TestExplainSysctls(t *testing.T) {
	perf := errors.New("perf_event_open: " + syscall.EACCES.Error())
	perfErr := &wrapped{perf, syscall.EACCES}
	writeSysctls(t, map[string]int{
		"kernel.perf_event_paranoid":       3,
		"kernel.unprivileged_bpf_disabled": 2,
		"kernel.yama.ptrace_scope":         1,
	})
	msg := on(0).explain("tracing", perfErr).Error()
	for _, want := range []string{"kernel.perf_event_paranoid=3", "Debian", "kernel.unprivileged_bpf_disabled=2", "kernel.yama.ptrace_scope=1", "perf_event_open: permission denied"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q lacks %q", msg, want)
		}
	}
	// With the capabilities that pass these settings, none refused it.
	msg = on(SetOf(CapBPF, CapPerfmon, CapSysPtrace)).explain("tracing", perfErr).Error()
	if strings.Contains(msg, "refused by kernel.") || !strings.Contains(msg, "no sysctl refuses these capabilities (kernel.unprivileged_bpf_disabled=2, kernel.perf_event_paranoid=3, kernel.yama.ptrace_scope=1)") {
		t.Errorf("%q", msg)
	}
	// Debian's level 3 before its 6.12 wants CAP_SYS_ADMIN.
	old := &machine{kernel: Version{6, 1}, effective: SetOf(CapBPF, CapPerfmon, CapSysPtrace), yama: -1, paranoid: 3}
	if msg := old.explain("tracing", perfErr).Error(); !strings.Contains(msg, "refused by kernel.perf_event_paranoid=3 (it refuses perf_event_open(2) without CAP_SYS_ADMIN") {
		t.Errorf("%q", msg)
	}
	// Yama's 3 refuses whatever the capabilities.
	writeSysctls(t, map[string]int{"kernel.yama.ptrace_scope": 3})
	if msg := on(SetOf(CapSysPtrace)).explain("tracing", perfErr).Error(); !strings.Contains(msg, "refused by kernel.yama.ptrace_scope=3") {
		t.Errorf("%q", msg)
	}
	// Not a permission error: as it is.
	other := errors.New("invalid argument")
	if Explain("tracing", other) != other || Explain("tracing", nil) != nil {
		t.Error("Explain changed an error that is not a refusal")
	}
	// Explained already: as it is.
	once := Explain("tracing", perfErr)
	if Explain("tracing", once) != once {
		t.Error("explained twice")
	}
}

type wrapped struct {
	err   error
	errno syscall.Errno
}

func (w *wrapped) Error() string { return w.err.Error() }
func (w *wrapped) Unwrap() error { return w.errno }

// on is this kernel's machine with the effective set have.
func on(have Set) *machine {
	return &machine{kernel: Version{6, 18}, effective: have, yama: -1}
}

// The grant keeps what the process holds of what probekit uses: a
// setcap line replaces the file's set.
func TestGrantKeepsHeld(t *testing.T) {
	denied := &fs.PathError{Op: "open", Path: "/srv/app/bin/server", Err: syscall.EACCES}
	var me *MissingError
	if err := on(SetOf(CapBPF, CapPerfmon, CapSysPtrace, CapSetuid)).explain("tracing", denied); !errors.As(err, &me) ||
		!sameCaps(me.Grant, []Cap{CapDACReadSearch, CapSysPtrace, CapPerfmon, CapBPF}) {
		t.Fatalf("%v: want a grant of CAP_DAC_READ_SEARCH with the held CAP_SYS_PTRACE, CAP_PERFMON, CAP_BPF", err)
	}
	m := on(SetOf(CapDACReadSearch, CapBPF))
	if err := m.need("tracing", []Work{LoadBPF}, nil); !errors.As(err, &me) ||
		!sameCaps(me.Grant, []Cap{CapDACReadSearch, CapPerfmon, CapBPF}) || !sameCaps(me.Missing, []Cap{CapPerfmon}) {
		t.Fatalf("%v: want CAP_PERFMON missing, the held CAP_DAC_READ_SEARCH kept", err)
	}
}
