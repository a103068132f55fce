package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/bits"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"

	"github.com/probekit/probekit/attach"
	"github.com/probekit/probekit/internal/features"
	"github.com/probekit/probekit/probe"
	"github.com/probekit/probekit/procmaps"
	"github.com/probekit/probekit/record"
	"github.com/probekit/probekit/usdt"
)

const traceUsage = "trace [--json] [--time] [-o FILE] [-p PID] [-f] [-n COUNT] [--str N,...] [--ring-size SIZE] [--stack[=cfi] | --count [--stack [--folded] [--pprof FILE]] | --hist N|ret | --latency] [--by KEY,... [--top N]] [-i SECONDS] [--filter EXPR] PROBE... [-- CMD ARGS...]\n" +
	"      PROBE := [usdt:]TARGET:PROVIDER:NAME | uprobe:TARGET:FUNC | uretprobe:TARGET:FUNC\n" +
	"      --latency uprobe:TARGET:FUNC (entry to return) | --latency START END (two probes, paired per thread)"

func init() {
	register(&command{
		name:    "trace",
		usage:   traceUsage,
		summary: "print every hit of the USDT probes (globs allowed in PROVIDER and NAME) with its decoded arguments, of the functions (globs allowed in FUNC) with their argument registers, and of their returns with the return value; with -- CMD, launch CMD stopped until attached, trace only it, and exit when it exits; with -f, the descendants of CMD or of -p PID too, each attached before it runs; TARGET \"*\" or a glob (python3*): every such object of -p PID or of the -f tree, now and later, or without either of every process on the host",
		runIO:   runTrace,
	})
}

// traceRequest is a parsed command line.
type traceRequest struct {
	json  bool
	pid   int
	count int
	// strMask has bit n set to print argument n (0-based) of USDT and
	// uprobe hits as the string it points to.
	strMask uint32
	// ringSize is the ring buffer's size in bytes.
	ringSize int
	// mode is ModeEvents, or ModeCount (--count) or ModeHist (--hist)
	// of value histVal (0-based; 0 for a return value), or ModeLatency
	// (--latency), whose probes are the starts then, from latEnd, the
	// ends (trace_latency.go).
	mode    record.Mode
	histVal int
	latEnd  int
	// interval, when not 0, prints the counts or histograms that often
	// too (-i).
	interval time.Duration
	// stack prints each hit's user stack, symbolized (--stack); with
	// --count it counts by stack (a stack key part). cfi unwinds
	// per-hit stacks from copies (--stack=cfi, trace_profile.go).
	stack, cfi bool
	// pprof and folded write --count --stack as a pprof profile to
	// that file, and print it folded (trace_profile.go).
	pprof  string
	folded bool
	// time prints each hit's time and command name (--time; --json
	// always has them).
	time bool
	// follow traces the descendants of -p or of the command too (-f).
	follow bool
	// outPath is the file the output goes to instead of standard output
	// (-o).
	outPath string
	// keys are --by's parts: --count and --hist per key tuple; top, when
	// not 0, prints only the top keys by count (--top).
	keys []keyPart
	top  int
	// filter are --filter's terms, evaluated in the kernel.
	filter []record.FilterTerm
	probes []probe.Spec
	cmd    []string
}

func parseTrace(args []string) (*traceRequest, error) {
	var cmd []string
	for i, a := range args {
		if a == "--" {
			args, cmd = args[:i], args[i+1:]
			break
		}
	}
	fs := flag.NewFlagSet("trace", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	req := &traceRequest{cmd: cmd}
	fs.BoolVar(&req.json, "json", false, "one JSON object per hit")
	pid := pidFlag(fs, "trace only this process")
	fs.IntVar(&req.count, "n", 0, "exit after COUNT hits (at least 1; without -n, no limit)")
	strs := fs.String("str", "", "comma-separated argument numbers (from 1) to print as strings")
	ring := fs.String("ring-size", "", "the ring buffer's size: a power of two with K, M or G (default 16M)")
	count := fs.Bool("count", false, "count the hits of each probe in the kernel; print the counts at exit")
	hist := fs.String("hist", "", "a log2 histogram of argument N (from 1) or of ret, built in the kernel; printed at exit")
	latency := fs.Bool("latency", false, "a log2 histogram of nanoseconds from a function's entry to its return (one uprobe PROBE), or from START to END (two PROBEs), paired per thread in the kernel; printed at exit")
	interval := fs.Int("i", 0, "with --count or --hist, print every SECONDS too")
	fs.StringVar(&req.outPath, "o", "", "write the output to FILE (created or truncated) instead of standard output")
	fs.BoolVar(&req.time, "time", false, "print each hit's time and command name (--json has them always)")
	fs.Var(&stackFlag{req}, "stack", "print each hit's user stack, symbolized (=cfi: unwound from a copy of the stack); with --count, count by stack")
	fs.StringVar(&req.pprof, "pprof", "", "with --count --stack, write the counted stacks to FILE as a pprof profile")
	fs.BoolVar(&req.folded, "folded", false, "with --count --stack, print the counted stacks folded (main;outer;leaf COUNT)")
	by := fs.String("by", "", "with --count or --hist, per KEY[,KEY...]: arg N, str N, ret, pid, tid, comm, probe, func")
	filter := fs.String("filter", "", "only the hits for which EXPR holds (argN, strN, ret, pid, tid, comm compared with constants, joined by && and ||), tested in the kernel")
	fs.IntVar(&req.top, "top", 0, "with --by, print the N keys counted most")
	fs.BoolVar(&req.follow, "f", false, "follow the descendants of -p PID or of -- CMD (forked, exec'd), attached before they run")
	pos, err := parseFlags(fs, joinByArgs(args))
	if err != nil {
		return nil, err
	}
	req.pid = *pid
	if *by != "" {
		if req.keys, err = parseKeys(*by); err != nil {
			return nil, usagef("--by %q: %v", *by, err)
		}
	}
	req.ringSize = record.DefaultRingSize
	if *ring != "" {
		n, err := parseSize(*ring)
		if err == nil {
			err = record.CheckRingSize(n, os.Getpagesize())
		}
		if err != nil {
			return nil, usagef("--ring-size %q: %v", *ring, err)
		}
		req.ringSize = n
	}
	if *strs != "" {
		for _, f := range strings.Split(*strs, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 || n > record.MaxArgs {
				return nil, usagef("--str %q: want argument numbers from 1 to %d", *strs, record.MaxArgs)
			}
			req.strMask |= 1 << (n - 1)
		}
		if bits.OnesCount32(req.strMask) > record.MaxStrs {
			return nil, usagef("--str %q: at most %d string arguments", *strs, record.MaxStrs)
		}
	}
	histRet := false
	switch {
	case *latency && (*count || *hist != ""):
		return nil, usagef("--latency, --count and --hist exclude each other")
	case *latency:
		req.mode = record.ModeLatency
	case *count && *hist != "":
		return nil, usagef("--count and --hist exclude each other")
	case *count:
		req.mode = record.ModeCount
	case *hist == "ret":
		req.mode, histRet = record.ModeHist, true
	case *hist != "":
		n, err := strconv.Atoi(*hist)
		if err != nil || n < 1 || n > record.MaxArgs {
			return nil, usagef("--hist %q: want an argument number from 1 to %d, or ret", *hist, record.MaxArgs)
		}
		req.mode, req.histVal = record.ModeHist, n-1
	}
	if err := stackCounting(req); err != nil {
		return nil, err
	}
	if req.mode != record.ModeEvents {
		switch {
		case req.count != 0:
			return nil, usagef("-n counts printed hits: --count, --hist and --latency print none")
		case req.strMask != 0:
			return nil, usagef("--str prints strings of hits: --count, --hist and --latency print none")
		case req.time:
			return nil, usagef("--time prints the time of each hit: --count, --hist and --latency print no hits")
		case *interval < 0:
			return nil, usagef("-i %d: want seconds", *interval)
		case req.top < 0:
			return nil, usagef("--top %d: want a number of keys", req.top)
		case req.top > 0 && len(req.keys) == 0:
			return nil, usagef("--top prints the top keys of --by")
		}
		req.interval = time.Duration(*interval) * time.Second
	} else if *interval != 0 {
		return nil, usagef("-i prints the counts of --count, --hist or --latency")
	} else if len(req.keys) > 0 || req.top != 0 {
		return nil, usagef("--by and --top key the counts of --count, --hist or --latency")
	}
	switch {
	case len(pos) == 0:
		return nil, usagef("want at least one PROBE: [usdt:]TARGET:PROVIDER:NAME, uprobe:TARGET:FUNC or uretprobe:TARGET:FUNC")
	case req.count < 0 || req.count == 0 && nSet(fs):
		// 0 is the default, no limit; written out it is refused rather
		// than read as "no limit" or "exit at once".
		return nil, usagef("-n %d: want a count of at least 1 (without -n, no limit)", req.count)
	case req.pid != 0 && len(cmd) > 0:
		return nil, usagef("-p and -- CMD exclude each other")
	case req.follow && req.pid == 0 && len(cmd) == 0:
		return nil, usagef("-f follows the descendants of -p PID or of -- CMD")
	}
	if cmd != nil && len(cmd) == 0 {
		return nil, usagef("-- needs a command")
	}
	takesStrs := false
	for _, p := range pos {
		ps, err := probe.Parse(p)
		if err != nil {
			return nil, usagef("probe %v", err)
		}
		req.probes = append(req.probes, ps)
		takesStrs = takesStrs || ps.Kind != record.KindUretprobe
	}
	if req.mode == record.ModeLatency {
		if err := req.latencyProbes(); err != nil {
			return nil, err
		}
	}
	if req.mode == record.ModeHist {
		for _, p := range req.probes {
			if (p.Kind == record.KindUretprobe) != histRet {
				return nil, usagef("--hist %s: a uretprobe has one value, ret; a USDT probe and a uprobe have arguments (N from 1)", *hist)
			}
		}
	}
	if *filter != "" {
		terms, usesRet, usesArgs, err := parseFilter(*filter)
		if err != nil {
			return nil, usagef("--filter %q: %v", *filter, err)
		}
		for _, p := range req.startProbes() {
			if ret := p.Kind == record.KindUretprobe; ret && usesArgs || !ret && usesRet {
				return nil, usagef("--filter %q: a uretprobe has one value, ret; a USDT probe and a uprobe have arguments (argN, strN)%s", *filter, req.atStart())
			}
		}
		req.filter = terms
	}
	for _, k := range req.keys {
		for _, p := range req.startProbes() {
			ret := p.Kind == record.KindUretprobe
			if (k.Kind == record.KeyArg || k.Kind == record.KeyStr) && (k.name == "ret") != ret {
				return nil, usagef("--by %s: a uretprobe has one value, ret; a USDT probe and a uprobe have arguments (arg N, str N)%s", k.name, req.atStart())
			}
		}
	}
	if req.strMask != 0 && !takesStrs {
		return nil, usagef("--str %q: numbers arguments, and a uretprobe has none: it prints a return value", *strs)
	}
	return req, nil
}

// nSet reports whether -n was given.
func nSet(fs *flag.FlagSet) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == "n" })
	return set
}

func runTrace(args []string, stdout, stderr io.Writer) error {
	req, err := parseTrace(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(stdout, "usage: probekit "+traceUsage)
		return err
	}
	if err != nil {
		var ue *usageError
		if errors.As(err, &ue) {
			return err
		}
		return usagef("%v", err)
	}
	if req.outPath != "" {
		f, err := os.OpenFile(req.outPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			return err
		}
		err = trace(req, f, stderr)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return err
	}
	return trace(req, stdout, stderr)
}

// traceSite is what an event's cookie stands for: a USDT location or a
// function probe, and the parts of its lines that every hit shares,
// formatted once.
type traceSite struct {
	// loc is the USDT location, whose argument specs say which values
	// are signed; nil for a function probe, whose values are registers
	// printed signed.
	loc *usdt.Location
	// kind is the kind of the records this site sends.
	kind record.Kind
	// label names the probe in counts and histograms: provider:name,
	// uprobe:FUNC or uretprobe:FUNC. Sites of one label add up.
	label string
	// fn is the function's name (FUNC), or a USDT probe's name: the
	// "func" key.
	fn string
	// A line is head, PID, the form's tidSep, TID, mid, the values
	// separated by the form's argSep, end. Text:
	//	PID/TID provider:name @0xADDR [ARGS]
	//	PID/TID uprobe:FUNC @0xADDR [ARGS]
	//	PID/TID uretprobe:FUNC @0xADDR = RET
	// JSON:
	//	{"kind":"usdt","provider":P,"name":N,"pid":PID,"tid":TID,"address":A,"args":[ARGS]}
	//	{"kind":"uprobe","function":F,"pid":PID,"tid":TID,"address":A,"args":[ARGS]}
	//	{"kind":"uretprobe","function":F,"pid":PID,"tid":TID,"address":A,"ret":RET}
	head, mid, end []byte
	// hits counts the events of this site (trace_hint.go reads them).
	hits int
	// skipped: the function of this site was left out of its glob's
	// attachment (uprobe.Options.Skip); counts and hints ignore it.
	skipped bool
	// params, set for a function its DWARF describes, prints the values
	// by name and type (trace_params.go).
	params *siteParams
}

// lineForm is what the lines of one output format share.
type lineForm struct {
	tidSep string
	argSep byte
	// argsEnd ends a line of arguments, retEnd a line with a return
	// value.
	argsEnd, retEnd string
}

var (
	textForm = lineForm{tidSep: "/", argSep: ' ', argsEnd: "]\n", retEnd: "\n"}
	jsonForm = lineForm{tidSep: `,"tid":`, argSep: ',', argsEnd: "]}\n", retEnd: "}\n"}
)

// tracer is one run of probekit trace.
type tracer struct {
	req   *traceRequest
	out   output
	form  *lineForm
	sites []traceSite
	hits  int
	// stacks names the frames of --stack; nil without it.
	stacks *stackNamer
	// exitErr is the launched command's failure (cmd.Wait), once the
	// loop has seen it exit.
	exitErr error
	// sitesMu, set by trace -f and selector targets, guards sites, which
	// grow while the loop runs (trace_follow.go).
	sitesMu *sync.RWMutex
	// errOut is where warnings go.
	errOut io.Writer
	// wallBase converts hit times to the wall clock (wallTime).
	wallBase int64
	// lat is --latency's (trace_latency.go).
	lat *latencyState
}

// wallTime converts a CLOCK_MONOTONIC time (bpf_ktime_get_ns) to the
// wall clock, as the clocks stood when the tracer started.
func (t *tracer) wallTime(mono uint64) time.Time {
	return time.Unix(0, t.wallBase+int64(mono))
}

// wallBase is the wall clock's time minus CLOCK_MONOTONIC's, in
// nanoseconds.
func wallBase() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0
	}
	return time.Now().UnixNano() - ts.Nano()
}

// syncWriter serializes writes: warnings come from the loop and from
// follow's notifications at once.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(b)
}

// warnf prints a warning line.
func (t *tracer) warnf(format string, args ...any) {
	fmt.Fprintf(t.errOut, "probekit trace: warning: "+format+"\n", args...)
}

func trace(req *traceRequest, stdout, stderr io.Writer) (err error) {
	if os.Geteuid() != 0 {
		return fmt.Errorf("tracing needs root (loading BPF programs and attaching uprobes): %w", os.ErrPermission)
	}
	var proc *procmaps.Process
	if req.pid != 0 {
		if proc, err = openTraced(req.pid); err != nil {
			return err
		}
	}
	var which record.Programs
	for _, p := range req.probes {
		if p.Kind == record.KindUSDT {
			which |= record.USDTProgram
		} else {
			which |= record.FuncProgram
		}
	}
	spec, err := record.Spec()
	if err != nil {
		return err
	}
	// The same call as uprobe.Prepare: both programs get this kernel's
	// attach type.
	if err := usdt.Prepare(spec); err != nil {
		return err
	}
	if err := sizeTraceMaps(spec); err != nil {
		return err
	}
	if err := spec.Variables[record.StrMaskName].Set(req.strMask); err != nil {
		return err
	}
	ringSize := req.ringSize
	if req.mode != record.ModeEvents {
		// Nothing is sent per hit.
		ringSize = os.Getpagesize()
		if err := record.SetMode(spec, req.mode, req.histVal); err != nil {
			return err
		}
		if len(req.keys) > 0 {
			parts := make([]record.KeyPart, len(req.keys))
			for i, k := range req.keys {
				parts[i] = k.KeyPart
			}
			if err := record.SetKeys(spec, parts); err != nil {
				return err
			}
		}
	}
	if err := record.SetRingSize(spec, ringSize, os.Getpagesize()); err != nil {
		return err
	}
	if len(req.filter) > 0 {
		if err := record.SetFilter(spec, req.filter); err != nil {
			return err
		}
	}
	if req.stack && req.mode == record.ModeEvents {
		if err := setStackRecords(spec, req); err != nil {
			return err
		}
	}
	objs, err := record.LoadSpec(spec, which)
	if err != nil {
		return err
	}
	defer objs.Close()
	var att *usdt.Attacher
	if which&record.USDTProgram != 0 {
		if att, err = usdt.NewAttacherWithMaps(spec, objs.Specs, objs.IPToSpecID); err != nil {
			return err
		}
	}
	t := newTracer(req, stdout, stderr)
	if req.follow || followSelectors(req) {
		return t.follow(objs, att, proc)
	}
	if proc != nil && t.stacks != nil {
		t.stacks.watch(proc)
	}

	var launched *procmaps.Launched
	opts := &usdt.Options{PID: req.pid, LocationCookie: t.cookie}
	if len(req.cmd) > 0 {
		launched, err = procmaps.Launch(launchCommand(req))
		if err != nil {
			return err
		}
		opts.Process = launched.Process
		if t.stacks != nil {
			t.stacks.watchLaunched(launched)
		}
		// Kills the command, stopped since its execve, on every error
		// return before Finish(nil) below lets it run.
		defer func() { err = launched.Finish(err) }()
	}

	if proc != nil {
		opts.Process = proc
	}

	var links []*attach.Link
	defer func() { closeLinks(links) }()
	fa := &funcAttacher{t: t, prog: objs.FuncProgram, table: objs.FuncIPs, proc: opts.Process}
	defer fa.close()
	for _, p := range req.probes {
		var l *attach.Link
		if p.Kind == record.KindUSDT {
			// The target as given: a path, a program on PATH or a
			// library name, as the process sees it with -p.
			l, err = att.Attach(objs.Program, p.Target, p.Provider, p.Name, t.latencyOptions(p, opts))
		} else {
			l, err = fa.attach(p)
		}
		if err != nil {
			if launched != nil {
				return launchHint(err)
			}
			return err
		}
		links = append(links, l)
		for _, w := range l.Warnings() {
			t.warnf("%s", w)
		}
	}
	// Attached: the files may go (the kernel holds what it needs).
	fa.close()
	if req.mode == record.ModeCount && len(req.keys) == 0 && len(t.sites) > record.MaxCounted {
		return fmt.Errorf("--count counts at most %d probe sites, these probes have %d", record.MaxCounted, len(t.sites))
	}

	var rd *ringbuf.Reader
	if req.mode == record.ModeEvents {
		if rd, err = ringbuf.NewReader(objs.Events); err != nil {
			return err
		}
		defer rd.Close()
	}

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(stop)

	exited := make(chan error, 1)
	if proc != nil {
		// Like a launched command, a traced process ends the trace when
		// it exits.
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			if proc.WaitExit(ctx) == nil {
				exited <- nil
			}
		}()
	}
	if launched != nil {
		if err := launched.Finish(nil); err != nil {
			return err
		}
		go func() { exited <- launched.Wait() }()
	}
	if err := t.run(objs, rd, stop, exited); err != nil {
		return err
	}
	prog := ""
	if launched != nil {
		prog = launched.Cmd.Path
	}
	t.hintSilent(t.errOut, links, opts.Process, prog)
	if t.exitErr != nil {
		// Every event is printed; the command failed (a crash under the
		// probes would show here).
		return fmt.Errorf("%s: %w", req.cmd[0], t.exitErr)
	}
	return nil
}

// launchHint adds to the refusal of a launched command's probe without
// BPF cookies that -f attaches it: stopped at its execve, the command
// has not mapped its libraries, whose runtime addresses the probes then
// need; a followed process gets its probes as it maps each file.
func launchHint(err error) error {
	if !errors.Is(err, ebpf.ErrNotSupported) {
		return err
	}
	if cookie, ferr := features.Have(features.Cookie); ferr != nil || cookie {
		return err
	}
	return fmt.Errorf("%w (with -f the probes are attached as the command maps the file)", err)
}

// run prints the hits (rd set) or the counts until stop, the end of the
// traced process (exited) or -n, then says what the kernel dropped.
func (t *tracer) run(objs *record.Objects, rd *ringbuf.Reader, stop <-chan os.Signal, exited <-chan error) error {
	var err error
	if rd != nil {
		err = t.loop(rd, stop, exited)
	} else {
		err = t.aggregateLoop(objs, stop, exited)
	}
	if err != nil {
		return err
	}
	if n, err := objs.DroppedCount(); err == nil && n > 0 {
		if rd != nil {
			fmt.Fprintf(t.errOut, "probekit trace: %d events lost (ring buffer full; a larger --ring-size keeps more)\n", n)
		} else {
			fmt.Fprintf(t.errOut, "probekit trace: %d hits not counted (no value to count, or the histogram map full)\n", n)
		}
	}
	if t.req.mode == record.ModeLatency {
		t.reportLatencyLost(objs)
	}
	if len(t.req.keys) > 0 {
		if n, err := objs.KeyOverflowCount(); err == nil && n > 0 {
			fmt.Fprintf(t.errOut, "probekit trace: %d hits not counted: the key map is full (%d keys)\n", n, record.MaxKeyed)
		}
	}
	return nil
}

// maxClosing bounds the links closed at once by closeLinks (each blocks a
// thread in close(2)).
const maxClosing = 512

// closeLinks closes links concurrently. Closing a uprobe link waits for
// the kernel's RCU grace periods (tens of milliseconds each); one at a
// time, the 2,566 links of uprobe:libc.so.6:* took two minutes to close,
// all at once about a second: concurrent closes share grace periods.
func closeLinks(links []*attach.Link) {
	var wg sync.WaitGroup
	slots := make(chan struct{}, maxClosing)
	for _, l := range links {
		slots <- struct{}{}
		wg.Go(func() {
			l.Close()
			<-slots
		})
	}
	wg.Wait()
}

func newTracer(req *traceRequest, stdout, stderr io.Writer) *tracer {
	t := &tracer{req: req, out: output{w: stdout, buf: make([]byte, 0, outputChunk+record.MaxEventSize*8)}, form: &textForm, errOut: &syncWriter{w: stderr}, wallBase: wallBase(),
		lat: &latencyState{ends: map[uint64]bool{}}}
	if req.json {
		t.form = &jsonForm
	}
	if req.stack || hasStackKey(req) {
		t.stacks = newStackNamer(req.cfi)
	}
	return t
}

// pfKthread is PF_KTHREAD, the kernel thread bit of the flags in field 9
// of /proc/PID/stat (include/linux/sched.h).
const pfKthread = 0x00200000

// openTraced opens the process -p names, refusing a kernel thread: it has
// no user space, so no probe of it ever fires.
func openTraced(pid int) (*procmaps.Process, error) {
	proc, err := procmaps.Open(pid)
	if err != nil {
		return nil, err
	}
	p, err := procfs.NewProc(pid)
	if err != nil {
		return nil, err
	}
	st, err := p.Stat()
	if err != nil {
		return nil, fmt.Errorf("pid %d: %w", pid, err)
	}
	if st.Flags&pfKthread != 0 {
		return nil, fmt.Errorf("pid %d (%s) is a kernel thread: no user space to trace", pid, st.Comm)
	}
	return proc, nil
}

// cookie numbers each attached location; events carry the number.
func (t *tracer) cookie(p *usdt.Probe, i int) uint64 {
	loc := &p.Locations[i]
	s := traceSite{loc: loc, kind: record.KindUSDT, label: p.Provider + ":" + p.Name, fn: p.Name, end: []byte(t.form.argsEnd)}
	if t.req.json {
		s.head = append(s.head, `{"kind":"usdt","provider":`...)
		s.head = appendJSON(s.head, p.Provider, false)
		s.head = append(s.head, `,"name":`...)
		s.head = appendJSON(s.head, p.Name, false)
		s.head = append(s.head, `,"pid":`...)
		s.mid = fmt.Appendf(nil, `,"address":%d,"args":[`, loc.Address)
	} else {
		s.mid = fmt.Appendf(nil, " %s:%s @%#x [", p.Provider, p.Name, loc.Address)
	}
	t.sites = append(t.sites, s)
	return uint64(len(t.sites) - 1)
}

// liveInterval bounds how long a hit waits before it is printed (the
// program does not wake the reader for every record: the reader polls),
// and how long a signal or the command's exit waits for the loop.
const liveInterval = 100 * time.Millisecond

// checkEvery is how many hits the loop formats between two looks at the
// clock and the stop signals while the ring stays busy.
const checkEvery = 1024

func (t *tracer) loop(rd *ringbuf.Reader, stop <-chan os.Signal, exited <-chan error) error {
	rec := ringbuf.Record{RawSample: make([]byte, 0, record.MaxRecordSize)}
	var ev record.Event
	draining := false
	rd.SetDeadline(time.Now().Add(liveInterval))
	for {
		err := rd.ReadInto(&rec)
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			// Nothing more came before the deadline: the ring is empty.
			if err := t.out.flush(); err != nil {
				return err
			}
			if draining {
				return nil
			}
		case err != nil:
			return err
		default:
			if err := t.handle(rec.RawSample, &ev); err != nil {
				return err
			}
			if t.req.count > 0 && t.hits >= t.req.count {
				return t.out.flush()
			}
			if draining || rec.Remaining != 0 && t.hits%checkEvery != 0 {
				continue
			}
			// Remaining 0: the ring is empty for now, and the next
			// read waits for a wakeup or the deadline.
			if rec.Remaining == 0 || time.Since(t.out.last) >= liveInterval {
				if err := t.out.flush(); err != nil {
					return err
				}
			}
		}
		// Between bursts, and every checkEvery hits of a long one.
		select {
		case <-stop:
			return t.out.flush()
		case err := <-exited:
			// Everything the command fired is in the ring by now: read
			// until it is empty, then stop.
			t.exitErr = err
			draining = true
			rd.SetDeadline(time.Now())
			continue
		default:
		}
		rd.SetDeadline(time.Now().Add(liveInterval))
	}
}

// handle decodes a record into ev and prints it, a chunk of output at a
// time.
func (t *tracer) handle(rec []byte, ev *record.Event) error {
	err := ev.Decode(rec)
	if err != nil {
		return err
	}
	if t.out.buf, err = t.appendHit(t.out.buf, ev); err != nil {
		return err
	}
	t.hits++
	if len(t.out.buf) >= outputChunk {
		return t.out.write()
	}
	return nil
}

// appendHit appends ev's line to b.
func (t *tracer) appendHit(b []byte, ev *record.Event) ([]byte, error) {
	if t.sitesMu != nil {
		t.sitesMu.RLock()
		defer t.sitesMu.RUnlock()
	}
	if ev.Cookie >= uint64(len(t.sites)) || ev.ArgCnt < 0 {
		return b, fmt.Errorf("event for unknown location (cookie %d, arg count %d)", ev.Cookie, ev.ArgCnt)
	}
	site, form := &t.sites[ev.Cookie], t.form
	if ev.Kind != site.kind {
		return b, fmt.Errorf("event of kind %d for a site of kind %d (cookie %d)", ev.Kind, site.kind, ev.Cookie)
	}
	site.hits++
	if t.req.time && !t.req.json {
		// TIME COMM PID/TID ...
		b = t.wallTime(ev.TimeNS).AppendFormat(b, "15:04:05.000000000")
		b = append(b, ' ')
		b = append(b, ev.CommName()...)
		b = append(b, ' ')
	}
	b = append(b, site.head...)
	b = strconv.AppendUint(b, uint64(ev.PID), 10)
	b = append(b, form.tidSep...)
	b = strconv.AppendUint(b, uint64(ev.TID), 10)
	if t.req.json {
		b = append(b, `,"comm":`...)
		b = appendJSON(b, ev.CommName(), false)
		b = append(b, `,"time_ns":`...)
		b = strconv.AppendUint(b, ev.TimeNS, 10)
		b = append(b, `,"time":"`...)
		b = append(t.wallTime(ev.TimeNS).UTC().AppendFormat(b, time.RFC3339Nano), '"')
	}
	b = append(b, site.mid...)
	if site.params != nil {
		b = t.appendParams(b, ev, site)
	} else {
		for i := range ev.NArgs {
			if i > 0 {
				b = append(b, form.argSep)
			}
			b = appendArg(b, ev, i, site.loc)
		}
	}
	if t.stacks == nil {
		return append(b, site.end...), nil
	}
	frames := t.stacks.symbolize(ev)
	if t.req.json {
		// The stack goes in the object: before its closing "}\n".
		b = append(b, site.end[:len(site.end)-2]...)
		return append(appendStackJSON(b, frames), "}\n"...), nil
	}
	return appendStackText(append(b, site.end...), frames), nil
}

// appendArg appends value i: signed or unsigned as its spec says (signed
// without a spec: a register), a quoted string, or null when the BPF
// program could not read it.
func appendArg(b []byte, ev *record.Event, i int, loc *usdt.Location) []byte {
	if ev.Errors&(1<<i) != 0 {
		return append(b, "null"...)
	}
	if str, ok := ev.Str(i); ok {
		// A JSON string is a fine quoted form for people too.
		return appendJSON(b, str, false)
	}
	v := ev.Args[i]
	if loc == nil || i >= len(loc.Args) || loc.Args[i].Signed {
		return strconv.AppendInt(b, v, 10)
	}
	// Unsigned: the program zero-extended it; an 8-byte value needs the
	// full unsigned range.
	return strconv.AppendUint(b, uint64(v), 10)
}

// outputChunk is the size of the writes of a burst: a pipe takes 64 KiB
// at a time, and fewer, larger writes leave the traced program the CPU.
const outputChunk = 256 << 10

// output batches lines: written by the chunk in a burst, flushed when the
// ring is empty and at least every liveInterval.
type output struct {
	w    io.Writer
	buf  []byte
	last time.Time // last flush
}

// write hands the lines to w.
func (o *output) write() error {
	if len(o.buf) == 0 {
		return nil
	}
	_, err := o.w.Write(o.buf)
	o.buf = o.buf[:0]
	return err
}

// flush writes the lines and flushes w when it buffers (main's stdout).
func (o *output) flush() error {
	o.last = time.Now()
	if err := o.write(); err != nil {
		return err
	}
	if f, ok := o.w.(interface{ Flush() error }); ok {
		return f.Flush()
	}
	return nil
}

// parseSize reads a byte count with an optional K, M or G (powers of
// 1024, "iB" allowed) suffix.
func parseSize(s string) (int, error) {
	num := strings.TrimSuffix(strings.TrimSuffix(s, "iB"), "B")
	shift := 0
	if n := len(num); n > 0 {
		switch num[n-1] {
		case 'K', 'k':
			shift = 10
		case 'M', 'm':
			shift = 20
		case 'G', 'g':
			shift = 30
		}
		if shift != 0 {
			num = num[:n-1]
		}
	}
	v, err := strconv.ParseUint(num, 10, 64)
	if err != nil || v == 0 {
		return 0, errors.New("want a size such as 16M, 256K or 1G")
	}
	if bits.Len64(v)+shift > 31 {
		return 0, fmt.Errorf("too large: at most %dM", record.MaxRingSize>>20)
	}
	return int(v) << shift, nil
}
