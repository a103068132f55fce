// Package follow keeps a set of wanted probes applied to a changing set of
// processes: a long-lived attachment.
//
// A [Tree] follows one process tree: a command it launches ([Launch]) or a
// running process ([Attach]), and every descendant, with or without exec.
// Each process of the tree gets the wanted probes attached filtered to its
// PID, before it runs an instruction of a new image, and loses them when it
// execs another image or exits.
//
// # Mechanism
//
// The tree is traced with ptrace (PTRACE_O_TRACEFORK, TRACEVFORK,
// TRACECLONE and TRACEEXEC; kprobes are not needed). The kernel stops a new
// child before its first instruction and a process right after each
// execve; the tracer attaches the probes for that PID, then resumes it. So a
// launched command and its descendants miss no hit: a probe is in place
// before any code of the image can reach it. Probes on files the process
// maps later (libraries loaded by ld.so or dlopen) fire too: a uprobe is
// registered on the file's inode, and the kernel plants it in every mapping
// made afterwards by a process the PID filter admits (uprobe_mmap), and
// raises the USDT semaphore there through ref_ctr_offset (Linux 4.20).
//
// For a running process ([Attach]), PTRACE_SEIZE joins the process and its
// descendants alive at that moment without stopping them; their children
// are followed from then on as above. What ran before the seize is not seen.
//
// Ptrace costs the traced processes a stop per fork, exec and signal, and a
// process has one tracer: a tree under a debugger (or strace) cannot be
// followed. When the Tree is closed its tracer thread exits, and the kernel
// detaches every traced process, which runs on untraced (exit_ptrace). A
// job-control stop (SIGSTOP, SIGTSTP) of a followed process is resumed at
// once: the tree does not stop as a whole.
//
// # Resources
//
// Each process holds one link per wanted probe; its links are closed
// (releasing their spec ids and semaphore counts) when it execs or exits,
// by a bounded pool of closers, since closing a uprobe link waits for RCU
// grace periods. Memory is proportional to the live processes of the tree.
package follow
