// Package follow keeps a set of wanted probes applied to a changing set of
// processes: a long-lived attachment.
//
// A wanted [Probe] is a USDT probe or a function probe, with its program
// and cookies, in a Target: a file (a path, a program on PATH, a library
// name), or a selector of files ("*" for every object, a glob of a path
// such as "/opt/*/python3*", or of a base name such as "python3*" or
// "libc.so*").
//
// Two kinds of attachment keep them applied:
//
//   - [Tree] follows one process tree: a command it launches ([Launch]) or
//     a running process ([Attach]), and every descendant, forked with or
//     without exec. Each process gets the probes filtered to its PID; a
//     selector probe is attached to each object the process maps, now and
//     later (dlopen).
//   - [Watch] follows the objects of one process ([WatchProcess]) or of
//     every process on the host, in every container ([WatchHost]): each
//     selected file is attached once, path-wide (by device and inode,
//     through a descriptor opened in the process's root), for every process
//     mapping it now and later.
//
// Both release a file's links, spec ids and semaphore counts when the last
// process using it execs another image or exits, and report each attach,
// release and failure (with the process and the file) to Options.Notify.
// A failure in one process never stops the others.
//
// # Mechanism
//
// A Tree is traced with ptrace (PTRACE_O_TRACEFORK, TRACEVFORK, TRACECLONE
// and TRACEEXEC; this needs no kprobes). The kernel stops a new child
// before its first instruction and a process right after each execve; the
// tracer attaches the probes for that PID, then resumes it. Probes on
// named files the process maps later fire too: a uprobe is registered on
// the file's inode, and the kernel plants it in every mapping made
// afterwards by a process the PID filter admits (uprobe_mmap), raising the
// USDT semaphore there through ref_ctr_offset (Linux 4.20). For selector
// probes, a BPF uprobe at the dynamic linker's _dl_debug_state (called by
// glibc's and musl's ld.so after every change of the link map: startup,
// dlopen, dlclose) stops the calling thread with a SIGSTOP sent by the
// kernel (bpf_send_signal_thread, Linux 5.5); the tracer attaches the new
// objects and resumes the thread without delivering the signal. So a
// launched command and its descendants miss no hit, in libraries loaded
// later included.
//
// With [Attach], PTRACE_SEIZE joins the process and its descendants alive
// at that moment without stopping them; their children are followed from
// then on as above. What ran before the seize is not seen.
//
// Ptrace costs the traced processes a stop at each fork, exec and signal,
// and a process has one tracer: a tree under a debugger (or strace) cannot
// be followed. When a Tree is closed its tracer thread exits and the
// kernel detaches every traced process, which runs on untraced
// (exit_ptrace). A job-control stop (SIGSTOP, SIGTSTP) of a followed
// process is resumed at once: the tree does not stop as a whole.
//
// A Watch learns of processes from BPF raw tracepoints (sched_process_exec
// and sched_process_exit, Linux 4.17) and of loaded libraries from the
// same _dl_debug_state uprobe, without stopping anyone: a new file is
// attached a few milliseconds after its process execs or maps it, and
// that process's hits before then are missed (a process that never maps
// a selected file costs a read of its maps). A file left by its last
// process stays attached for a second, so a program run over and over
// loses nothing after its first run. Measured with BenchmarkMissedHits
// (follow:tick every 100 µs, 2 shared cores): a binary never seen before
// loses about 20% of its hits in a process living 10 ms, 9% in 100 ms,
// 0.5% in 1 s; in a launched Tree none. A process that maps objects
// without a dynamic linker (a static binary's own mmap) is rescanned only
// at exec. The watch costs every process of the host a uprobe hit at each
// change of its link map (a few at startup, one per dlopen), and the
// watcher a read of its maps then (BenchmarkWatcherCPU: about 0.3 s of CPU
// per 1,000 process starts).
//
// # Resources
//
// A Tree holds, per live process, one link per named probe and one per
// selected file; a Watch one link per selected file. Links are closed by a
// bounded pool of closers (closing a uprobe link waits for RCU grace
// periods). Memory is proportional to the live processes and the files
// they map, not to how many came and went (TestFollowChurn: 1,000
// short-lived processes).
package follow
