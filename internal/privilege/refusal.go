package privilege

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"syscall"
)

// RefusedError is a permission error from the kernel that the process's
// capabilities do not explain: a sysctl may have refused it. It wraps
// the kernel's error.
type RefusedError struct {
	Err error
	// Effective is the process's effective set.
	Effective Set
	// Sysctls are the settings that may refuse it, with their values.
	Sysctls []Sysctl
	// Refusing are the settings among Sysctls whose value refuses a
	// process with these capabilities, each with why.
	Refusing []string
}

func (e *RefusedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v (refused by the kernel with capabilities %s; ", e.Err, e.Effective)
	if len(e.Refusing) > 0 {
		fmt.Fprintf(&b, "refused by %s", strings.Join(e.Refusing, ", and "))
	} else {
		var set []string
		for _, s := range e.Sysctls {
			set = append(set, fmt.Sprintf("%s=%d", s.Name, s.Value))
		}
		fmt.Fprintf(&b, "no sysctl refuses these capabilities (%s): an LSM (SELinux, AppArmor), a seccomp filter or capabilities held outside the initial user namespace may have", strings.Join(set, ", "))
	}
	b.WriteString(")")
	return b.String()
}

func (e *RefusedError) Unwrap() error { return e.Err }

// refusalSysctls are the settings that refuse BPF, perf events and
// ptrace beyond the capability checks, with the test of whether a value
// refuses a process holding have ("" when it does not).
var refusalSysctls = []struct {
	name    string
	refuses func(v int, have Set, m *machine) string
}{
	{"kernel.unprivileged_bpf_disabled", func(v int, have Set, _ *machine) string {
		if v != 0 && !have.Has(CapBPF) && !have.Has(CapSysAdmin) {
			return "bpf(2) without CAP_BPF"
		}
		return ""
	}},
	{"kernel.perf_event_paranoid", func(v int, have Set, m *machine) string {
		// Above 2 is a Debian patch: no perf_event_open(2) at all
		// without privilege, CAP_SYS_ADMIN before its 6.12 (Table).
		if v > 2 && !have.Has(CapSysAdmin) && m.kernel.Less(linux612) {
			return "perf_event_open(2) without CAP_SYS_ADMIN (Debian's level 3, which before its 6.12 does not take CAP_PERFMON)"
		}
		if v > 2 && !have.Has(CapPerfmon) && !have.Has(CapSysAdmin) {
			return "perf_event_open(2) without CAP_PERFMON (Debian's level 3)"
		}
		if v >= 2 && !have.Has(CapPerfmon) && !have.Has(CapSysAdmin) {
			return "kernel profiling and other users' events without CAP_PERFMON"
		}
		return ""
	}},
	{"kernel.yama.ptrace_scope", func(v int, have Set, _ *machine) string {
		switch {
		case v >= 3:
			return "ptrace of any process, whatever the capabilities"
		case v >= 1 && !have.Has(CapSysPtrace):
			return "ptrace of a process that is not a descendant without CAP_SYS_PTRACE"
		}
		return ""
	}},
}

// Explain adds to a permission error what refused it: a capability the
// process lacks, as a *MissingError (reading a file under /proc needs
// CAP_SYS_PTRACE, another file CAP_DAC_READ_SEARCH), or, when the
// capabilities do not explain it, the sysctls that may have refused it,
// as a *RefusedError. Other errors, and errors already explained, are
// returned as they are.
func Explain(activity string, err error) error {
	if err == nil || !errors.Is(err, syscall.EPERM) && !errors.Is(err, syscall.EACCES) {
		return err
	}
	var me *MissingError
	var re *RefusedError
	if errors.As(err, &me) || errors.As(err, &re) {
		return err
	}
	m, cerr := current()
	if cerr != nil {
		return err
	}
	return m.explain(activity, err)
}

func (m *machine) explain(activity string, err error) error {
	have := m.effective
	var pe *fs.PathError
	if errors.As(err, &pe) {
		w := UnreadableFile
		if inProc, inRoot := procPath(pe.Path); inProc && (!inRoot || !have.Has(CapSysPtrace)) {
			w = OtherUser
		}
		if err1 := m.need(activity, []Work{w}, map[Work]string{w: pe.Path}); err1 != nil {
			me := err1.(*MissingError)
			me.Err = err
			return me
		}
	}
	re := &RefusedError{Err: err, Effective: have}
	for _, s := range refusalSysctls {
		v := readSysctl(s.name)
		if !v.Known || v.Value < 0 {
			continue
		}
		re.Sysctls = append(re.Sysctls, v)
		if why := s.refuses(v.Value, have, m); why != "" {
			re.Refusing = append(re.Refusing, fmt.Sprintf("%s=%d (it refuses %s)", v.Name, v.Value, why))
		}
	}
	return re
}

// procPath reports whether path is a process's under /proc/PID/, and
// whether it is a file of the process's root or working directory
// (/proc/PID/root/..., /proc/PID/cwd/...), which the kernel reaches
// through the ptrace check of the link, then with the caller's file
// permissions.
func procPath(path string) (inProc, inRoot bool) {
	rest, ok := strings.CutPrefix(path, "/proc/")
	if !ok {
		return false, false
	}
	pid, rest, _ := strings.Cut(rest, "/")
	if pid == "" || strings.Trim(pid, "0123456789") != "" && pid != "self" {
		return false, false
	}
	entry, rest, _ := strings.Cut(rest, "/")
	return true, rest != "" && (entry == "root" || entry == "cwd")
}
