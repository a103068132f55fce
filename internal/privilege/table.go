package privilege

import "fmt"

// Work is something probekit does that the kernel guards by a
// capability.
type Work int

const (
	// LoadBPF is loading BPF programs and maps and attaching them to
	// uprobes (perf_event_open or uprobe_multi links) and to the
	// scheduler's raw tracepoints (-f, host-wide "*", the exporter).
	LoadBPF Work = iota
	// LockMemory is BPF memory charged to RLIMIT_MEMLOCK.
	LockMemory
	// OtherUser is reading another user's process: /proc/PID/maps,
	// root, mem, map_files (trace -p, host-wide "*", symbolize -p).
	OtherUser
	// UnreadableFile is opening a file, or searching a directory, that
	// the user's uid and gids may not.
	UnreadableFile
	// AttachRunning is ptrace's PTRACE_SEIZE of a running process
	// (trace -f -p PID).
	AttachRunning
	// LaunchTraced is PTRACE_TRACEME in a launched command
	// (trace -- CMD), so that it stops at its exec until attached.
	LaunchTraced
	numWork
)

var workNames = [numWork]string{
	LoadBPF:        "load",
	LockMemory:     "memlock",
	OtherUser:      "other user",
	UnreadableFile: "unreadable file",
	AttachRunning:  "seize",
	LaunchTraced:   "launch",
}

// String is w's short name, as docs/privileges.md's tables name it.
func (w Work) String() string {
	if w >= 0 && w < numWork {
		return workNames[w]
	}
	return fmt.Sprintf("work %d", int(w))
}

// Rule says which capabilities a work needs, and when.
type Rule struct {
	Work Work
	// What is the work, as errors and docs name it.
	What string
	// When says on which machines the rule applies, for people; ""
	// means always.
	When string
	// Need are the capabilities the work needs, every one ...
	Need []Cap
	// ... or, when OrAdmin, CAP_SYS_ADMIN instead of them all.
	OrAdmin bool
	// Why is the kernel's check.
	Why string
	// applies reports whether the rule holds on a machine.
	applies func(*machine) bool
}

// linux58 and linux511 are the releases where the rules change.
var (
	linux58  = Version{5, 8}
	linux511 = Version{5, 11}
	linux612 = Version{6, 12}
)

// Table is which work needs which capability: the source of Need's
// checks, of its errors and of docs/privileges.md.
var Table = []Rule{
	{
		Work:    LoadBPF,
		What:    "loading BPF programs and maps, attaching uprobes",
		When:    "Linux 5.8 and later",
		Need:    []Cap{CapBPF, CapPerfmon},
		OrAdmin: true,
		Why: "bpf(2) checks CAP_BPF to create maps and load programs, and CAP_PERFMON for the kprobe-type programs uprobes run and for tracepoint programs; " +
			"perf_event_open(2) of a uprobe checks CAP_PERFMON; CAP_SYS_ADMIN passes both checks " +
			`("bpf, capability: Introduce CAP_BPF" and "capabilities: introduce CAP_PERFMON to kernel and user space", Linux 5.8)`,
		applies: func(m *machine) bool { return !m.kernel.Less(linux58) },
	},
	{
		Work:    LoadBPF,
		What:    "loading BPF programs and maps, attaching uprobes",
		When:    "before Linux 5.8",
		Need:    []Cap{CapSysAdmin},
		Why:     "bpf(2) and perf_event_open(2) of a uprobe check CAP_SYS_ADMIN",
		applies: func(m *machine) bool { return m.kernel.Less(linux58) },
	},
	{
		Work: LoadBPF,
		What: "opening perf events (uprobes) under kernel.perf_event_paranoid above 2",
		When: "kernel.perf_event_paranoid is 3 or more on Linux before 6.12 (Debian's level 3)",
		Need: []Cap{CapSysAdmin},
		Why: "a Debian patch adds level 3: no perf_event_open(2) without privilege; measured in the VMs, Debian's 5.10 (5.10.0-32) and 6.1 (6.1.0-50) " +
			"refuse a uprobe to CAP_BPF and CAP_PERFMON at level 3 and accept CAP_SYS_ADMIN, its 6.12 (6.12.117) accepts CAP_PERFMON",
		applies: func(m *machine) bool { return m.paranoid > 2 && m.kernel.Less(linux612) },
	},
	{
		Work: LockMemory,
		What: "raising RLIMIT_MEMLOCK for BPF maps and programs",
		When: "before Linux 5.11, unless RLIMIT_MEMLOCK is unlimited (systemd LimitMEMLOCK=infinity)",
		Need: []Cap{CapSysResource},
		Why: "until the memory cgroup accounts BPF memory (Linux 5.11), bpf(2) charges maps and programs to RLIMIT_MEMLOCK; " +
			"probekit raises the limit to unlimited, which needs CAP_SYS_RESOURCE above the hard limit",
		applies: func(m *machine) bool { return m.kernel.Less(linux511) && !m.memlockUnlimited },
	},
	{
		Work: OtherUser,
		What: "reading another user's process (its maps, root, memory)",
		When: "the process's uids or gids are not the caller's, or it is not dumpable",
		Need: []Cap{CapSysPtrace},
		Why:  "/proc/PID/maps, root and mem check ptrace_may_access(PTRACE_MODE_READ_FSCREDS): the caller's uid and gid must be the process's real, effective and saved ones, or it needs CAP_SYS_PTRACE",
	},
	{
		Work: UnreadableFile,
		What: "reading a file, or searching a directory, the user may not",
		When: "a target, library or debug file the user cannot read",
		Need: []Cap{CapDACReadSearch},
		Why:  "CAP_DAC_READ_SEARCH bypasses the read permission of files and the search permission of directories; the kernel resolves a uprobe's path with the caller's permissions too",
	},
	{
		Work:    AttachRunning,
		What:    "following a running process (PTRACE_SEIZE)",
		When:    "kernel.yama.ptrace_scope is 1 or 2 (a process of another user needs it anyway; 3 refuses everyone)",
		Need:    []Cap{CapSysPtrace},
		Why:     "PTRACE_SEIZE checks PTRACE_MODE_ATTACH; Yama's ptrace_scope 1 lets a process trace only its descendants without CAP_SYS_PTRACE, 2 only with it",
		applies: func(m *machine) bool { return m.yama == 1 || m.yama == 2 },
	},
	{
		Work:    LaunchTraced,
		What:    "launching a command stopped at its exec (PTRACE_TRACEME)",
		When:    "kernel.yama.ptrace_scope is 2 (3 refuses everyone)",
		Need:    []Cap{CapSysPtrace},
		Why:     "Yama's ptrace_scope 2 lets a child ask to be traced only by a parent with CAP_SYS_PTRACE",
		applies: func(m *machine) bool { return m.yama == 2 },
	},
}

// Use is what one probekit command or mode needs, in the table's terms.
type Use struct {
	// Command is the command line, as docs name it.
	Command string
	// Works are what it does that the table guards; none for work that
	// needs no privilege.
	Works []Work
	// Note says when a work is needed, for people.
	Note string
}

// Uses lists the commands and modes, for docs/privileges.md.
var Uses = []Use{
	{"probekit list FILE, list -p PID (of one's own process), symbolize -e FILE, cflags", nil, "no privilege: they read files and processes the user may read"},
	{"probekit trace PROBE (a path)", []Work{LoadBPF, LockMemory}, "CAP_DAC_READ_SEARCH too when the user may not read the target"},
	{"probekit trace -p PID", []Work{LoadBPF, LockMemory, OtherUser}, "CAP_SYS_PTRACE only for another user's process"},
	{"probekit trace -- CMD", []Work{LoadBPF, LockMemory, LaunchTraced}, "the command runs as the caller"},
	{"probekit trace -f -p PID", []Work{LoadBPF, LockMemory, OtherUser, AttachRunning}, ""},
	{"probekit trace -f -- CMD", []Work{LoadBPF, LockMemory, LaunchTraced}, "descendants are traced from their fork"},
	{"probekit trace '*' (host-wide)", []Work{LoadBPF, LockMemory, OtherUser, UnreadableFile}, "CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH to see the processes and objects of other users"},
	{"probekit trace --stack, --count --stack", []Work{LoadBPF, LockMemory, OtherUser}, "nothing beyond the trace itself: the stacks of another user's process are read under CAP_SYS_PTRACE"},
	{"probekit export", []Work{LoadBPF, LockMemory, OtherUser, UnreadableFile}, "CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH for the processes and objects of other users"},
}

// rules are the rules of w.
func rules(w Work) []Rule {
	var out []Rule
	for _, r := range Table {
		if r.Work == w {
			out = append(out, r)
		}
	}
	return out
}
