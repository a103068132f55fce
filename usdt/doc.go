// Package usdt reads USDT probes (the .note.stapsdt probes of sys/sdt.h,
// DTrace-style providers and runtimes such as CPython, OpenJDK, PostgreSQL
// and Ruby) from ELF files and attaches BPF programs to them.
//
// # What a USDT probe is
//
// A program built with sys/sdt.h carries, at each STAP_PROBE call site, a
// single NOP instruction and an ELF note describing it: owner "stapsdt",
// type 3, holding the NOP's link-time address, the address of the
// .stapsdt.base section at link time, the address of an optional 2-byte
// semaphore (a counter the program tests before computing costly
// arguments), and three strings: provider, name, and the arguments as
// assembler operands ("-4@%edi 8@-8(%rbp)"). A tracer places a uprobe on
// the NOP and reads the arguments from the registers and memory the
// operands name. One provider:name can have many call sites (inlining,
// repeated uses), each with its own operands and possibly its own
// semaphore, so a Probe has Locations, never a single address.
//
// # Phases
//
// Reading is pure and deterministic, so an amd64 machine lists an arm64 or
// big-endian s390x binary exactly:
//
//  1. note.go walks the note areas of the file (the SHT_NOTE sections, or
//     the PT_NOTE segments of a file without section headers, as readelf
//     -n does) and decodes each stapsdt note with the file's class and byte
//     order, never the host's.
//  2. file.go groups notes into probes and decodes arguments with argspec
//     for the file's e_machine. A location whose arguments do not decode
//     keeps its raw string and the error (Location.ArgsErr); the rest of
//     the file is still listed.
//  3. resolve.go applies the prelink delta and turns addresses into file
//     offsets through the PT_LOAD that contains them.
//  4. site.go checks that the bytes at each location are the architecture's
//     NOP (Location.Site), reading nearby sites together.
//  5. cache.go keeps parsed files by identity for the attacher.
//
// Attaching (attach.go, link.go, spec.go) happens afterwards and is where
// the kernel, processes and privileges come in.
//
// # Decisions
//
// File offsets, not addresses. Uprobes take file offsets for executables
// and libraries alike. Each address is translated through its own
// PT_LOAD (off = addr − p_vaddr + p_offset), never one global delta:
// linkers emit several PT_LOADs with different deltas, and libraries can
// start at a non-zero p_vaddr. An address in no PT_LOAD is an error, not
// kept as is.
//
// Executable probes, writable semaphores. The probe must lie in a segment
// with PF_X and in its file-backed part; the semaphore in a segment
// without PF_X. A location breaking either rule gets a SiteError wrapping
// ErrBadSite instead of an offset: attaching there would plant a
// breakpoint in data or make the kernel increment a counter inside code.
//
// The NOP check. A wrong offset puts an int3 in the middle of someone's
// instruction and crashes their process. Every location's first
// instruction must be a NOP of the file's architecture, in any of its
// encodings, since producers may choose their own (libbpf's usdt.h takes
// USDT_NOP from the user): decoded with golang.org/x/arch where it has a
// decoder (x86 90, 66 90 and 0f 1f /0 with any operand and prefixes; arm64
// hint #0; A32 nop and mov rN, rN; s390x branches with mask 0; ppc nop,
// xnop and pnop), compared otherwise (Thumb bf00, nop.w and mov r8, r8;
// riscv 00000013 and c.nop 0001; loongarch 03400000); nop.go cites the
// manuals. x86 90 followed by libbpf/usdt's 5- or 10-byte NOP is told
// apart (Location.Site), and every site's length is kept
// (Location.SiteLength). Instructions that merely do nothing (hints,
// PAUSE) are refused: the check is there to catch wrong offsets. The
// result is computed while parsing
// from the file's content (Location.Site, Location.SiteErr), so the
// attacher refuses a bad site without reading the file again, and
// probekit list shows it. The alternative, checking at attach time only,
// would hide broken notes from the listing.
//
// Prelink. Prelink moves sections but not note contents, so each note's
// location and semaphore move by sh_addr(.stapsdt.base) − note base. The
// delta applies only when both are non-zero (libbpf 69d85c5f): a zeroed
// note base or a garbage-collected section would otherwise shift probes
// onto unrelated code and semaphores onto unrelated data. The semaphore
// moves with the location, as the SystemTap wiki says (libbpf does not).
//
// Hostile files. A tracer runs as root over binaries that other users
// control. The ELF reader (internal/safeelf) and the note walker check
// every offset and size against the file, allocate by what the file
// actually holds and never by a header's count or size, and stop at named
// ceilings (16 MiB of notes, 2^18 sections); a panic would still be
// recovered into an error. Corruption is a *FormatError with the file
// offset; absence of notes is ErrNoProbes. debug/elf is not used for
// parsing: it documents that it is not hardened, and a reader of the few
// structures we need is smaller than a wrapper around all of it.
//
// Sharing. Files from a Cache are shared between callers, and locations
// with the same argument string share one []argspec.Arg: treat them as
// read-only. In exchange, listing libjvm.so (531 notes) allocates once per
// location, not once per argument.
//
// # Attaching
//
// The BPF side is usdt/bpf/usdt.bpf.h (package usdt/bpf ships it; its
// doc says how to get the include flag, or run `probekit cflags`):
// libbpf's BPF-side API (BPF_USDT, bpf_usdt_arg, bpf_usdt_arg_cnt,
// bpf_usdt_arg_size, bpf_usdt_cookie) and map names, with libbpf 1.7's
// spec layout, loadable by cilium/ebpf. A program written for libbpf ports
// by changing its include. The Go side:
//
//	spec, _ := loadMyTracer()          // bpf2go
//	usdt.Prepare(spec)                 // before load: see below
//	coll, _ := ebpf.NewCollection(spec)
//	att, _ := usdt.NewAttacher(spec, coll)
//	l, _ := att.Attach(coll.Programs["handler"], "python3.11",
//		"python", "function__*", &usdt.Options{PID: pid, Cookie: 7})
//	defer l.Close()
//
// Prepare, because two choices are fixed when the program is loaded. It
// is attach.Prepare, the same call as uprobe.Prepare: programs in "usdt"
// (and "uprobe") sections get the uprobe_multi attach type where the
// kernel has uprobe_multi with its PID-filter fix (46ba0e49b642): one link
// then carries every location of a file, and closing it costs one RCU
// grace period instead of one per location (tens of ms each). And
// usdt.bpf.h's constant probekit_usdt_have_cookie says whether the BPF
// side finds a location's spec through the BPF cookie (5.15) or through
// the IP map; a kernel constant replaces libbpf's kconfig extern, which
// cilium/ebpf cannot fill. A program loaded without Prepare is refused
// with ErrNotPrepared, never attached another way.
//
// Specs. Each location's arguments become a spec (spec.go), encoded for the
// layout the object's BTF describes: libbpf 1.7's (base+index operands) or
// the older one, where such an operand alone becomes unavailable. An
// operand no BPF program can read (a SIMD register, a symbol that cannot
// be resolved) makes bpf_usdt_arg return -EINVAL for that argument only,
// and Link.Warnings says why; libbpf fails the whole attach instead.
// PC-relative operands (sym+8(%rip)) are read relative to the probe's
// runtime IP, so no PID is needed. Identical specs share a slot, within an
// attach and across attaches (any process, any link of the Attacher), so
// a file attached in thousands of processes takes the slots of one
// attach; slots come from a free list and go back when their last link
// closes, so attach and detach can cycle forever (the tests run 10,000
// cycles).
//
// Semaphores. The kernel raises a location's semaphore when it installs
// the breakpoint in a process and lowers it when the uprobe goes, even if
// the tracer is killed (ref_ctr_offset, Linux 4.20). It counts installed
// breakpoints, not links: two links on one site leave the counter at 1.
// Without ref_ctr_offset, or with Options.UserSemaphores, the counter is
// raised through /proc/PID/mem (package semaphore), which needs a PID and
// is undone on Close, not on a crash. A registration the kernel refuses
// because another uprobe holds the site with another ref_ctr offset (or
// none: another tracer attached without the semaphore) is reported as
// ErrRefCtrConflict, whose message says how to find that tracer. A
// user-space writer (bcc, or this fallback) that reads and writes the
// counter back can erase the kernel's raise; the kernel, finding 0 when
// the uprobe goes, then keeps it on the file for good. So a link attached
// with a PID sets such a counter of its process back to 1 just before it
// detaches (semaphore.RestoreForDetach), and the kernel lowers it to 0.
//
// The phases of an attach, one file each: objects.go opens the targets and
// finds their probes; plan.go builds the specs and writes them to slots;
// hold.go raises user-space semaphores and fills the IP map; attach.go
// hands the sites to the attach core (package attach), which places one
// uprobe_multi link per file or one perf-event uprobe per location.
//
// All or nothing. Every resource an attach takes (spec slots, IP map
// entries, semaphore counts) is released if the attach core fails, and
// the core detaches what it attached; so on any error nothing stays
// behind. The site check (Location.SiteErr) runs before anything is
// attached. Link.Close detaches first, then releases the rest, joins the
// errors, and is idempotent. Link is attach.Link, the type package uprobe
// returns too.
//
// Targets. A target is a path, a program on PATH or a library name
// (procmaps.Resolve), in every process that maps the file, now and later.
// With a PID, the target is resolved as the process sees it: a path inside
// its root (a container's view), a bare name among the objects it maps;
// an empty target means every object the process has mapped. Each file is
// opened once, as a regular file, without blocking (a FIFO fails at once),
// parsed from that descriptor and given to the kernel as /proc/self/fd/N;
// errors name the target as given. Without BPF cookies a
// position-independent file needs that PID, and the process must have
// mapped it: the IP map is keyed by the process and the runtime address
// (a non-PIE executable by its link-time address, for every process), so
// that processes mapping a library at different addresses never collide.
// Package follow attaches each process's probes as it maps their files.
// procmaps.Launch starts a command stopped right after exec so that a
// short-lived program misses no probe.
package usdt
