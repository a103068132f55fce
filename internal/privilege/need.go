package privilege

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// machine is what the rules depend on.
type machine struct {
	kernel           Version
	effective        Set
	memlockUnlimited bool
	// yama is kernel.yama.ptrace_scope, -1 without Yama.
	yama int
	// paranoid is kernel.perf_event_paranoid, -1 when unknown.
	paranoid int
}

// current reads the running machine.
func current() (*machine, error) {
	m := &machine{yama: -1, paranoid: -1}
	var err error
	if m.kernel, err = RunningKernel(); err != nil {
		return nil, err
	}
	if m.effective, err = Effective(); err != nil {
		return nil, err
	}
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim); err == nil {
		m.memlockUnlimited = lim.Cur == unix.RLIM_INFINITY
	}
	if y := readSysctl("kernel.yama.ptrace_scope"); y.Known && y.Value >= 0 {
		m.yama = y.Value
	}
	if p := readSysctl("kernel.perf_event_paranoid"); p.Known {
		m.paranoid = p.Value
	}
	return m, nil
}

// MissingError is work refused before it starts because the process
// lacks a capability it needs, or refused by the kernel for it. It wraps
// os.ErrPermission.
type MissingError struct {
	// Activity is what was asked for ("tracing").
	Activity string
	// For are the unmet rules' What, with a path or PID when known.
	For []string
	// Missing are the capabilities the process lacks.
	Missing []Cap
	// Grant are the capabilities to grant: all that the activity's
	// work needs on this kernel, held or not.
	Grant []Cap
	// Effective is the process's effective set.
	Effective Set
	// Err is the kernel's refusal the error explains; nil when the
	// work was refused before it started.
	Err error
}

func (e *MissingError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s lacks %s: it needs %s; the process has %s",
		e.Activity, capList(e.Missing), strings.Join(e.For, "; "), e.Effective)
	fmt.Fprintf(&b, "; grant %s with (as root) `setcap %s+ep %s`, systemd AmbientCapabilities=%s, or Kubernetes securityContext.capabilities.add: [%s]",
		capList(e.Grant), setcapList(e.Grant), executable(), systemdList(e.Grant), kubernetesList(e.Grant))
	if e.Err != nil {
		fmt.Fprintf(&b, ": %v", e.Err)
	} else {
		fmt.Fprintf(&b, ": %v", os.ErrPermission)
	}
	return b.String()
}

// Unwrap is os.ErrPermission and the kernel's refusal, if any.
func (e *MissingError) Unwrap() []error {
	if e.Err != nil {
		return []error{os.ErrPermission, e.Err}
	}
	return []error{os.ErrPermission}
}

// executable is the running binary's path, for the setcap line.
func executable() string {
	if p, err := os.Executable(); err == nil {
		return p
	}
	return "BINARY"
}

func capList(caps []Cap) string {
	var names []string
	for _, c := range caps {
		names = append(names, c.String())
	}
	return strings.Join(names, ", ")
}

func setcapList(caps []Cap) string {
	var names []string
	for _, c := range caps {
		names = append(names, strings.ToLower(c.String()))
	}
	return strings.Join(names, ",")
}

func systemdList(caps []Cap) string {
	var names []string
	for _, c := range caps {
		names = append(names, c.String())
	}
	return strings.Join(names, " ")
}

func kubernetesList(caps []Cap) string {
	var names []string
	for _, c := range caps {
		names = append(names, c.bare())
	}
	return strings.Join(names, ", ")
}

// Need checks that the process holds what works need on this machine,
// and returns a *MissingError naming what it lacks. Before Linux 5.11 it
// raises RLIMIT_MEMLOCK to unlimited for LoadBPF (with
// CAP_SYS_RESOURCE). activity names the request in the error
// ("tracing").
func Need(activity string, works ...Work) error {
	m, err := current()
	if err != nil {
		return fmt.Errorf("%s: reading the process's capabilities: %w", activity, err)
	}
	if err := m.need(activity, works, nil); err != nil {
		return err
	}
	if slices.Contains(works, LockMemory) && m.kernel.Less(linux511) && !m.memlockUnlimited {
		inf := unix.Rlimit{Cur: unix.RLIM_INFINITY, Max: unix.RLIM_INFINITY}
		if err := unix.Setrlimit(unix.RLIMIT_MEMLOCK, &inf); err != nil {
			return fmt.Errorf("%s: raising RLIMIT_MEMLOCK for BPF memory (Linux %v charges it there): %w", activity, m.kernel, err)
		}
	}
	return nil
}

// need checks works on m; detail, when given, adds a path or PID to a
// work's name in the error.
func (m *machine) need(activity string, works []Work, detail map[Work]string) error {
	var missing Set
	var unmet []string
	for _, r := range m.applicable(works) {
		if r.OrAdmin && m.effective.Has(CapSysAdmin) {
			continue
		}
		lack := SetOf(r.Need...) &^ m.effective
		if lack == 0 {
			continue
		}
		missing |= lack
		what := capList(r.Need)
		if r.OrAdmin {
			what += " (or CAP_SYS_ADMIN)"
		}
		what += " for " + r.What
		if d := detail[r.Work]; d != "" {
			what += " (" + d + ")"
		} else if r.When != "" {
			what += " (" + r.When + ")"
		}
		unmet = append(unmet, what)
	}
	if missing == 0 {
		return nil
	}
	// A file's capabilities (setcap), a unit's or a pod's list are
	// replaced, not added to: the grant keeps what the process holds of
	// what probekit uses here.
	grant := m.required(works) | m.effective&m.required(allWork)
	return &MissingError{Activity: activity, For: unmet, Missing: missing.Caps(), Grant: grant.Caps(), Effective: m.effective}
}

// applicable are the rules of works that apply on m. Where one needs
// CAP_SYS_ADMIN itself, the rules it also stands in for (OrAdmin) are
// left out: CAP_SYS_ADMIN does their work.
func (m *machine) applicable(works []Work) []Rule {
	var out []Rule
	admin := false
	for _, w := range works {
		for _, r := range rules(w) {
			if r.applies == nil || r.applies(m) {
				out = append(out, r)
				admin = admin || slices.Contains(r.Need, CapSysAdmin)
			}
		}
	}
	if admin {
		out = slices.DeleteFunc(out, func(r Rule) bool { return r.OrAdmin })
	}
	return out
}

// procDir is where processes are read (a test points it elsewhere).
var procDir = "/proc"

// OfProcess is what reading process pid needs beyond what reading one's
// own does: OtherUser when its real, effective or saved uid or gid is
// not the caller's effective uid or gid (as the kernel compares them
// for /proc/PID/maps), nothing otherwise or when its status cannot be
// read (the read that follows reports that).
func OfProcess(pid int) []Work {
	b, err := os.ReadFile(procDir + "/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return nil
	}
	// The file-system ids are the effective ones: probekit never calls
	// setfsuid(2).
	uid, gid := os.Geteuid(), os.Getegid()
	if !statusIDs(b, "Uid:", uid) || !statusIDs(b, "Gid:", gid) {
		return []Work{OtherUser}
	}
	return nil
}

// statusIDs reports whether the real, effective and saved ids of
// /proc/PID/status's line key ("Uid:\t1000\t1000\t1000\t1000") are
// all id; false when the line is missing or malformed.
func statusIDs(status []byte, key string, id int) bool {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || f[0] != key {
			continue
		}
		for _, s := range f[1:4] {
			if n, err := strconv.Atoi(s); err != nil || n != id {
				return false
			}
		}
		return true
	}
	return false
}

// Required are the capabilities works need on this machine, in
// increasing number: what to grant a process that does them (CAP_BPF
// and CAP_PERFMON rather than CAP_SYS_ADMIN where both would do).
func Required(works ...Work) ([]Cap, error) {
	m, err := current()
	if err != nil {
		return nil, err
	}
	return m.required(works).Caps(), nil
}

func (m *machine) required(works []Work) Set {
	var s Set
	for _, r := range m.applicable(works) {
		s |= SetOf(r.Need...)
	}
	return s
}

// allWork is every work of the table.
var allWork = func() []Work {
	var all []Work
	for w := range numWork {
		all = append(all, w)
	}
	return all
}()
